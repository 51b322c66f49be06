"""Last line against orphaned vLLM engines when `specserve serve` stops its local Ray.

Each pool replica stops its own engine when Serve shuts it down (`PoolServer.__del__`), and Ray
kills a dead worker's process group (`RAY_NODE_ENV`). Should a replica still die first (a
shutdown that timed out, a second signal), its `VLLM::EngineCore` and `VLLM::Worker` processes
(~1.7 GB each on the tiny models, GPU memory on a GPU node) would be reparented to init and live
on. The driver notes them before it stops Ray and kills any that survive it.
"""

from __future__ import annotations


import psutil

ENGINE_TITLE_PREFIX = "VLLM::"  # vLLM's process titles: VLLM::EngineCore, VLLM::Worker...


def engine_processes(root_pid: int) -> list[psutil.Process]:
    """The vLLM engine processes among `root_pid`'s descendants."""
    out = []
    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for p in children:
        try:
            if " ".join(p.cmdline()).startswith(ENGINE_TITLE_PREFIX):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def reap(processes: list[psutil.Process], grace_s: float = 10.0) -> list[int]:
    """Waits up to `grace_s` for `processes` to exit, then kills the rest; returns their pids."""
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return [p.pid for p in alive]
