"""Each CPU replica owns its cores, as a GPU replica owns its GPUs (deployments/cores.py): on the
session application (the real path), no two engine processes of different replicas may run on the
same core. The lease itself: tests/unit/test_cores.py.
"""

from __future__ import annotations

import pytest


def allowed_cores(pid: int) -> set[int]:
    """A process's CPU affinity as the kernel reports it (/proc/PID/status)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Cpus_allowed_list:"):
            out = set()
            for part in line.split(":", 1)[1].strip().split(","):
                lo, _, hi = part.partition("-")
                out |= set(range(int(lo), int(hi or lo) + 1))
            return out
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


def engine_cores() -> dict[str, tuple[list[int], set[int]]]:
    """Per pool: the cores its (single) replica leased and the union of its engine processes'
    affinities, read from /proc."""
    from ray import serve

    out = {}
    for pool in ("vanilla", "speculative"):
        info = serve.get_deployment_handle(pool, app_name="specserve").engine_processes.remote(
        ).result(timeout_s=60)
        assert info["pids"], f"{pool}: no engine process under its replica"
        out[pool] = (info["cores"], set().union(*(allowed_cores(p) for p in info["pids"])))
    return out


@pytest.mark.serve
def test_no_two_replicas_engines_share_a_core(client):
    cores = engine_cores()
    for pool, (leased, affinity) in cores.items():
        assert leased and affinity == set(leased), (pool, leased, affinity)
    assert not cores["vanilla"][1] & cores["speculative"][1], cores
