"""Where a benchmark's CPU time goes: the serving stack's parts by process, and the machine.

On CPU the engines and the frontend (Serve's proxy, the router, each pool replica's own process)
share the machine's cores, so every cell records how many cores each part kept busy.
"""

from __future__ import annotations

import os

import psutil


def process_class(proc: psutil.Process) -> str | None:
    """Which part of the serving stack a process is: "engines" (vLLM's EngineCore/Worker),
    "pool replicas" (the LLMServer processes: tokenising, detokenising, streaming), "router",
    "proxy" (Serve's HTTP proxy, or HAProxy under `RAY_SERVE_ENABLE_HA_PROXY`), "ray" (GCS, raylet, Serve controller and other Ray daemons),
    "client" (this benchmark); None for the rest of the machine."""
    try:
        name, cmd = proc.name(), " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if name.startswith("VLLM::") or "VLLM::" in cmd:
        return "engines"
    if "ServeReplica:" in cmd or "ServeReplica:" in name:
        return "router" if ":router" in cmd + name else "pool replicas"
    if "ProxyActor" in cmd + name or name == "haproxy":
        return "proxy"
    if proc.pid == os.getpid():
        return "client"
    if any(k in cmd + name for k in ("raylet", "gcs_server", "ray::", "ServeController",
                                     "dashboard", "log_monitor", "runtime_env")):
        return "ray"
    return None


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) used so far by each `process_class`, over live processes, and
    under "machine" the busy seconds of the whole machine (all cores, everything but idle and
    iowait)."""
    out: dict[str, float] = {}
    for proc in psutil.process_iter():
        kind = process_class(proc)
        if kind is None:
            continue
        try:
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out[kind] = out.get(kind, 0.0) + t.user + t.system
    t = psutil.cpu_times()
    out["machine"] = sum(t) - t.idle - getattr(t, "iowait", 0.0)
    return out


def busy_cores(before: dict[str, float], after: dict[str, float], wall_s: float
               ) -> dict[str, float]:
    """Cores each part kept busy on average between two `cpu_seconds()` readings `wall_s` apart
    (CPU seconds / wall seconds; the machine has `os.cpu_count()` cores). A part whose processes
    all ended in between is left out."""
    return {kind: round((after[kind] - before.get(kind, 0.0)) / wall_s, 2)
            for kind in sorted(after) if wall_s > 0}
