"""The CPU image serves: `specserve image build` of manifests/image/Containerfile.cpu on a local
stand-in for rayproject/ray (manifests/image/local-base.sh: no image registry is needed), then
`specserve serve` inside a container of it, the models bind-mounted at /models, answers a
completion over HTTP.

Skips, saying why, where podman (or mmdebstrap, for a base not yet made) is missing
(`.ci/image-tools` installs them), where the base cannot be made (no user namespaces for a
non-root mmdebstrap), where podman cannot start a container, or where the models are not built.
The images stay in the containers storage: a rebuild with unchanged inputs takes every layer from
buildah's cache. The container, and with it its mounts, does not.
Measured on an idle 2-core machine (2026-12-03): cold 7.3 min (base ~40 s, image 279 s, first
completion 114 s after `podman run`); warm 2.3 min (image 12 s). Marked `own_ray`: its Ray runs
in the container, before the session's application starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from cluster.image import IMAGE_DIR, REPO_ROOT
from core import DEFAULT_CONFIG_PATH, models_dir

pytestmark = [pytest.mark.serve, pytest.mark.own_ray]

BASE = "localhost/ray-local:2.60.0-py311-cpu"
PORT = int(os.environ.get("SPECSERVE_TEST_PORT", "8123")) + 60
CONTAINER = f"specserve-image-test-{os.getpid()}"
BASE_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 1800
READY_TIMEOUT_S = 480
PROMPT = {"model": "specserve-tiny", "prompt": "def fibonacci(n):", "max_tokens": 16,
          "temperature": 0}


def _run(cmd: list[str], timeout_s: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, **kw)


def _tail(text: str, chars: int = 3000) -> str:
    return text[-chars:]


@pytest.fixture(scope="module")
def base() -> str:
    """The stand-in base image, made once (skips where it cannot be made or run)."""
    if shutil.which("podman") is None:
        pytest.skip("podman not found (.ci/image-tools installs it)")
    if not (models_dir() / "target" / "config.json").is_file():
        pytest.skip(f"models not built in {models_dir()} (make models)")
    # Kept when made by the same script, else made (mmdebstrap; user namespaces when not root).
    made = _run([str(IMAGE_DIR / "local-base.sh"), BASE], BASE_TIMEOUT_S)
    if made.returncode != 0:
        last = (made.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the local base image cannot be made here: {last}")
    probe = _run(["podman", "run", "--rm", "--network", "host", BASE, "true"], 120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"podman cannot start a container here ({last}); .ci/image-tools configures "
                    "a machine whose default runtime or ulimits fail")
    return BASE


@pytest.fixture(scope="module")
def image(base) -> str:
    """The CPU image's tag, built (or taken from the layer cache) by `specserve image build`."""
    t0 = time.monotonic()
    built = _run([sys.executable, "-m", "cluster.image", "build", "--engine", "cpu",
                  "--base", base], BUILD_TIMEOUT_S, cwd=REPO_ROOT)
    assert built.returncode == 0, _tail(built.stderr)
    print(f"image built in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return built.stdout.strip().splitlines()[-1]


def test_image_layout(image):
    """Runs as Ray's user, holds every package of pyproject.toml's packages.find, keeps no build
    leftovers, points at the models volume, has the HEALTHCHECK, and vLLM finds specserve's
    plugin by entry point."""
    find = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = [name.rstrip("*") for name in find["packages"]["find"]["include"]]
    script = (f"import {', '.join(packages)}; "
              "import os, importlib.metadata as md, pathlib; "
              "print(os.getuid(), os.environ['SPECSERVE_MODELS_DIR'], "
              "sorted(e.name for e in md.entry_points(group='vllm.general_plugins')), "
              "[p for p in ('/tmp/src', '/tmp/out', '/tmp/wheels', '/tmp/pip-extra', "
              "os.path.expanduser('~/.cache/pip')) if pathlib.Path(p).exists()])")
    out = _run(["podman", "run", "--rm", "--network", "host", image, "python", "-c", script], 120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(maxsplit=2)[:2] == ["1000", "/models"], out.stdout
    assert "specserve_cpu_sampling" in out.stdout and out.stdout.rstrip().endswith("[]"), out.stdout
    health = _run(["podman", "image", "inspect", "--format", "{{json .Config.Healthcheck}}",
                   image], 60)
    assert "/health" in health.stdout or "SPECSERVE_HEALTH_URL" in health.stdout, health.stdout


def test_image_serves_a_completion(image, tmp_path: Path):
    """`specserve serve` in the container (host network, the default config on another port,
    eager engines to start sooner) answers the README's completion."""
    cfg = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    for pool in ("vanilla", "speculative"):
        cfg[pool] |= {"enforce_eager": True, "profile_max_batch": 32}
    cfg["server"]["port"] = PORT
    config_dir = tmp_path / "config"
    config_dir.mkdir(mode=0o755)
    config_dir.chmod(0o755)  # the container's user (uid 1000) reads it
    (config_dir / "serve.yaml").write_text(yaml.safe_dump(cfg))
    tmp_path.chmod(0o755)
    t0 = time.monotonic()
    started = _run(["podman", "run", "-d", "--name", CONTAINER, "--network", "host",
                    "--shm-size", "2g", "-v", f"{_readable_models(tmp_path)}:/models:ro",
                    "-v", f"{config_dir}:/config:ro",
                    "-e", f"SPECSERVE_HEALTH_URL=http://127.0.0.1:{PORT}/health", image,
                    "specserve", "serve", "--config", "/config/serve.yaml"], 120)
    assert started.returncode == 0, started.stderr
    try:
        reply = _first_completion(f"http://127.0.0.1:{PORT}", time.monotonic() + READY_TIMEOUT_S)
        print(f"first completion {time.monotonic() - t0:.0f} s after `podman run`: "
              f"{json.dumps(reply.json()['choices'][0]['text'])}", file=sys.stderr)
        assert reply.json()["choices"][0]["text"], reply.text
        assert reply.headers["x-specserve-route"] in ("vanilla", "speculative"), reply.headers
        # One pool may answer while the other's engine still starts, and /health (the
        # HEALTHCHECK's URL) is 503 until every pool is up: wait for that, then ask podman.
        _ready(f"http://127.0.0.1:{PORT}", time.monotonic() + READY_TIMEOUT_S)
        health = _run(["podman", "healthcheck", "run", CONTAINER], 60)
        assert health.returncode == 0, f"HEALTHCHECK: {health.stdout}{health.stderr}"
    finally:
        _run(["podman", "stop", "--time", "30", CONTAINER], 90)
        _run(["podman", "rm", "--force", CONTAINER], 60)
        left = _run(["podman", "ps", "--all", "--quiet", "--filter", f"name={CONTAINER}"], 60)
        assert left.stdout.strip() == "", f"container {CONTAINER} left behind"


def _readable_models(tmp_path: Path) -> Path:
    """The models folder to mount: the lab's own where the container's user (uid 1000) can read
    every file, else a world-readable copy (the lab writes model.safetensors with mode 0600,
    ~60 MB in all)."""
    files = [f for f in models_dir().rglob("*") if f.is_file()]
    if all(f.stat().st_mode & 0o004 for f in files):
        return models_dir()
    copy = tmp_path / "models"
    shutil.copytree(models_dir(), copy)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return copy


def _first_completion(base_url: str, deadline: float) -> httpx.Response:
    """The completion, once the application answers one; fails with the container's log when it
    exits or the deadline passes."""
    with httpx.Client(base_url=base_url, timeout=60) as client:
        while True:
            state = _run(["podman", "inspect", "--format", "{{.State.Running}}", CONTAINER], 60)
            if state.stdout.strip() != "true":
                pytest.fail(f"the container exited:\n{_logs()}")
            try:
                reply = client.post("/v1/completions", json=PROMPT)
                if reply.status_code == 200:
                    return reply
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                pytest.fail(f"no completion within {READY_TIMEOUT_S} s:\n{_logs()}")
            time.sleep(3)


def _ready(base_url: str, deadline: float) -> None:
    """Returns once GET /health is 200 (every pool's engines up); fails with its last reply and
    the container's log at the deadline."""
    last = "no reply"
    with httpx.Client(base_url=base_url, timeout=30) as client:
        while True:
            try:
                reply = client.get("/health")
                if reply.status_code == 200:
                    return
                last = f"{reply.status_code} {reply.text}"
            except httpx.TransportError as error:
                last = repr(error)
            if time.monotonic() > deadline:
                pytest.fail(f"/health not 200 within {READY_TIMEOUT_S} s (last: {last}):\n{_logs()}")
            time.sleep(3)


def _logs() -> str:
    out = _run(["podman", "logs", CONTAINER], 60)
    return _tail(out.stdout + out.stderr)
