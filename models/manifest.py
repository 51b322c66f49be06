"""Build identity and atomic output folders.

A build folder is complete exactly when its `manifest.json` exists: the manifest is written last
inside a private partial folder that is then renamed into place, so a killed build leaves only a
`.NAME.partial-PID` folder, which the next build removes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from models.params import CODE_VERSION, BuildParams

MANIFEST_NAME = "manifest.json"
MODELS_DIR_ENV = "SPECSERVE_MODELS_DIR"


def default_models_dir() -> Path:
    """`$SPECSERVE_MODELS_DIR`, else `~/.cache/specserve/models` (same rule as core.paths)."""
    return Path(os.environ.get(MODELS_DIR_ENV, "~/.cache/specserve/models")).expanduser()


def build_digest(params: BuildParams, corpus_digest: str) -> str:
    """sha256 hex of CODE_VERSION, the build parameters and the corpus digest."""
    payload = json.dumps({"code_version": CODE_VERSION, "params": params.as_dict(),
                          "corpus_digest": corpus_digest}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def manifest(params: BuildParams, corpus_digest: str) -> dict:
    """The manifest.json content of a build."""
    return {"digest": build_digest(params, corpus_digest), "code_version": CODE_VERSION,
            "corpus_digest": corpus_digest, "params": params.as_dict()}


def read_manifest(out: Path) -> dict | None:
    """`out/manifest.json` as a dict, or None when missing or unreadable."""
    try:
        return json.loads((out / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None


def is_built(out: Path, digest: str) -> bool:
    """Whether `out` holds a complete build with this digest."""
    found = read_manifest(out)
    return found is not None and found.get("digest") == digest


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(out: Path) -> None:
    """Removes partial and old folders of `out` left by builds whose process is gone."""
    for path in out.parent.glob(f".{out.name}.*-*"):
        kind, _, pid = path.name.rpartition("-")
        if kind.endswith((".partial", ".old")) and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """Yields an empty folder next to `out` that replaces `out` when the block ends without error,
    its files made readable by every user (0644, folders 0755).

    On an exception the partial folder is removed and `out` is left as it was.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(out)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    # Readable by every user: a serving container runs as another uid (1000 in Ray's images) than
    # the build, and safetensors writes its files 0600.
    for path in (partial, *partial.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(partial, out)
    shutil.rmtree(old, ignore_errors=True)


def write_json(path: Path, data: dict) -> None:
    """Writes `data` as indented JSON with a trailing newline."""
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
