"""CPU cores owned by one replica, as a GPU replica owns its GPUs.

On CPU the accelerator is a core: each CPU pool replica leases `tensor_parallel_size` cores of its
node that no other replica holds, runs its vLLM engine on them (`VLLM_CPU_OMP_THREADS_BIND`, no
reserved core) and pins every engine process to them. Ray schedules a CPU replica as one logical
CPU per tensor-parallel rank (deployments/pools.py), so a node never places more replicas than it
has cores; the lease picks *which* cores.

A lease is an exclusive `flock` on one file per core in a directory shared by every process on the
node (`$SPECSERVE_CORES_DIR`, else `<tmp>/specserve-cores`). The kernel drops the lock when the
holding process exits, however it exits (`kill -9` included), so a replacement replica finds the
cores of a killed one free without any cleanup. Measured on a 2-core machine (two
engines at batch 4): both engines on vLLM's automatic binding shared core 0 and made 499 tok/s
together; one core each made 863 (../shared/DESIGN.md §3).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import psutil

CORES_DIR_ENV = "SPECSERVE_CORES_DIR"
# Set (to 1) on a node whose Ray declares more CPUs than it has cores on purpose (the test suite
# runs several small applications on 2 cores): a replica that finds no free core runs unbound
# instead of failing to start.
SHARE_CORES_ENV = "SPECSERVE_SHARE_CORES"


def node_cores() -> int:
    """Cores this process may run on (its CPU affinity): the logical CPUs a local Ray node
    started by specserve declares, so that Ray places one CPU replica per core."""
    return len(os.sched_getaffinity(0))


class NoFreeCores(RuntimeError):
    """Fewer free cores on this node than the replica needs (every other one is leased)."""


def cores_dir() -> Path:
    """Where the per-core lock files live: `$SPECSERVE_CORES_DIR`, else `<tmp>/specserve-cores`."""
    return Path(os.environ.get(CORES_DIR_ENV) or Path(tempfile.gettempdir()) / "specserve-cores")


class CoreLease:
    """Exclusive use of some of this node's cores for as long as this process holds the lease.

    Args:
        cores: the leased core ids, ascending.
        files: the open, locked lock files (closing them releases the lease).
    """

    def __init__(self, cores: list[int], files: list):
        self.cores = cores
        self._files = files

    @classmethod
    def acquire(cls, count: int, owner: str, allowed: set[int] | None = None) -> CoreLease:
        """Leases `count` free cores among `allowed` (default: this process's CPU affinity).

        Args:
            count: cores wanted, >= 1.
            owner: written into each lock file, for whoever looks (e.g. a replica id).

        Raises:
            NoFreeCores: fewer than `count` cores are free; names the holders of the others.
        """
        folder = cores_dir()
        folder.mkdir(parents=True, exist_ok=True)
        held, busy = [], []
        for core in sorted(allowed if allowed is not None else os.sched_getaffinity(0)):
            if len(held) == count:
                break
            f = open(folder / f"core-{core}.lock", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                busy.append(f"{core} ({f.read().strip() or 'unknown'})")
                f.close()
                continue
            f.seek(0)
            f.truncate()
            f.write(f"{owner} pid {os.getpid()}\n")
            f.flush()
            held.append((core, f))
        if len(held) < count:
            for _, f in held:
                f.close()
            raise NoFreeCores(f"{owner}: needs {count} free core(s), {len(held)} free; leased: "
                              f"{', '.join(busy) or 'none'}")
        return cls([c for c, _ in held], [f for _, f in held])

    def vllm_env(self) -> dict[str, str]:
        """vLLM CPU settings that put the engine's OpenMP threads on exactly these cores
        (`vllm/utils/ompmultiprocessing.py`: a core list, and no core reserved for the scheduler,
        which would otherwise take one of them)."""
        return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, self.cores)),
                "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}

    def pin_children(self, pid: int | None = None) -> list[int]:
        """Pins every thread of every descendant process of `pid` (default: this process) to
        the leased cores; returns the pinned process ids. Threads they start later inherit it."""
        pinned = []
        for child in psutil.Process(pid or os.getpid()).children(recursive=True):
            try:
                for thread in child.threads():
                    os.sched_setaffinity(thread.id, self.cores)
                pinned.append(child.pid)
            except (psutil.NoSuchProcess, ProcessLookupError):
                continue
        return pinned

    def release(self) -> None:
        """Gives the cores back (idempotent)."""
        for f in self._files:
            f.close()
        self._files = []
