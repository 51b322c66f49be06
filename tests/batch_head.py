"""A real `ray start --head` for the batch job tests, isolated from other Ray clusters on the
machine.

Its own temp dir (so a plain `ray.init()` elsewhere does not find it), its own ports, and it is
stopped by process id: `ray stop` would stop every Ray cluster on the machine. Stopping deletes the
Serve applications first (vLLM engines shut down with their replicas), then ends the head's
processes and any of their descendants still alive (engine processes included).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def _group(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def descendants(roots: list[int]) -> set[int]:
    """`roots` and every process below them."""
    kids, seen, todo = _children(), set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += kids.get(pid, [])
    return seen


class RayHead:
    """One local Ray head with a dashboard (the job server `ray job submit` talks to).

    Args:
        temp_dir: Ray's temp dir for this head (short: it holds unix sockets).
        port: GCS port.
        dashboard_port: dashboard / job server port.
        num_cpus: logical CPUs (a CPU pool replica takes 1 per tensor-parallel rank).
        env: environment of the head (and so of every job driver and replica).
    """

    def __init__(self, temp_dir: str, port: int, dashboard_port: int, num_cpus: int, env: dict):
        self.temp_dir, self.port, self.dashboard_port = temp_dir, port, dashboard_port
        self.num_cpus, self.env = num_cpus, env
        self.pgid: int | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self) -> None:
        proc = subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--head", f"--port={self.port}",
             "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
             f"--dashboard-port={self.dashboard_port}", f"--num-cpus={self.num_cpus}",
             f"--temp-dir={self.temp_dir}", f"--ray-client-server-port={self.port + 1}",
             f"--dashboard-agent-listen-port={self.port + 2}", "--disable-usage-stats"],
            env=self.env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.pgid = proc.pid  # its own session: the head's daemons inherit this process group
        out, _ = proc.communicate(timeout=180)
        if proc.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed:\n{out[-3000:]}")

    def run(self, code: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
        """Runs Python `code` as a driver connected to this head."""
        return subprocess.run([sys.executable, "-c", code], env={**self.env,
                              "RAY_ADDRESS": self.address}, capture_output=True, text=True,
                              timeout=timeout_s)

    def stop(self) -> None:
        if self.pgid is None:
            return
        try:
            self.run("import ray; from ray import serve; ray.init(); serve.shutdown()", 120)
        except subprocess.TimeoutExpired:
            pass
        pids = descendants(_group(self.pgid))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
                time.sleep(0.2)
        self.pgid = None
