"""Stopping `specserve serve` leaves no vLLM engine process behind.

A pool replica's engine runs in child processes (`VLLM::EngineCore`, and `VLLM::Worker` under it,
~1.7 GB each on the tiny models); they were seen to outlive SIGTERM of `specserve serve`. Three
layers stop them: the replica's `__del__` shuts its engine down (deployments/pools.py), Ray kills a
dead worker's process group (core/config.py RAY_NODE_ENV), and the CLI reaps survivors
(cluster/engine_reaper.py, which says so on stderr: a clean stop must not need it).

Runs its own small application (vanilla pool only, no profile) in a subprocess on its own local
Ray, never touching the session's shared application; only the engine processes of that
subprocess tree are counted (other Ray clusters may run on the same machine). Marked `own_ray`:
it runs before the session's application starts, as `specserve serve` runs on a machine of its
own (beside the session's idle engines each variant took ~130 s in CI, ~100 s alone).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from core import DEFAULT_CONFIG_PATH
from cluster.engine_reaper import engine_processes

pytestmark = [pytest.mark.serve, pytest.mark.own_ray]

PORT = int(os.environ.get("SPECSERVE_TEST_PORT", "8123")) + 50
READY_TIMEOUT_S = 420
EXIT_TIMEOUT_S = 120


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("target, sig", [
    pytest.param("process", signal.SIGTERM, id="sigterm-process"),
    pytest.param("group", signal.SIGTERM, id="sigterm-group")])
def test_stopping_serve_leaves_no_engine_process(tmp_path: Path, target: str, sig: int):
    """SIGTERM to `specserve serve` alone (a process manager), or to its whole process group
    (`timeout`), which also hits Ray's and vLLM's processes directly. Ctrl-C in a terminal
    (SIGINT to the group) is not run here: under a loaded full-suite run `serve` then sometimes
    missed EXIT_TIMEOUT_S (an open bug; it passed alone)."""
    cfg = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    cfg["speculative"]["num_replicas"] = 0
    cfg["vanilla"] |= {"enforce_eager": True, "profile_max_batch": 0}
    cfg["server"]["port"] = PORT
    config = tmp_path / "one_pool.yaml"
    config.write_text(yaml.safe_dump(cfg))
    log = (tmp_path / "serve.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "cluster.cli", "serve", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    engines: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "specserve ready" not in Path(log.name).read_text():
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(2)
        engines = engine_processes(proc.pid)
        assert any("EngineCore" in " ".join(p.cmdline()) for p in engines), engines
        if target == "group":
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        rc = proc.wait(EXIT_TIMEOUT_S)
        out = Path(log.name).read_text()
        if target == "process":  # a clean shutdown: each replica stopped its own engine
            assert rc == 0, out[-3000:]
            assert "outlived their replicas" not in out, out[-3000:]
        deadline = time.monotonic() + 10  # an orphan would live on indefinitely
        while any(_alive(p) for p in engines) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [(p.pid, " ".join(p.cmdline())) for p in engines if _alive(p)]
        assert left == [], f"engine processes outlived `specserve serve`: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in engines:  # never leave 1.7 GB orphans on a shared machine, even on failure
            if _alive(p):
                p.kill()
