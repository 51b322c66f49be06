"""Which pools can take a request now, and which failures mean "this replica is gone".

A pool is unavailable for `hold_s` after a request to it failed with a replica failure, and for as
long as the StatsBoard lists none of its replicas once it has listed some (every replica dead or
restarting: a replica reports only once its engine serves). The router sends an unavailable pool's
requests to the other pool (reason `pool_unavailable`) and takes the pool back as soon as a replica
reports again.

A request already waiting on a pool whose last replica left the board is abandoned and retried on
the other pool (`PoolLost`, router/ingress.py): Serve's DeploymentHandle queues a request for a
deployment with no running replica until one starts (minutes for a vLLM engine; ray-project/ray
#40995), so a request caught between a replica's death and the board noticing would otherwise hang.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Mapping

from ray.exceptions import NodeDiedError, RayActorError, WorkerCrashedError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, \
    ReplicaUnavailableError

from deployments.stats import STALE_AFTER_S, PoolStats

# What a DeploymentHandle raises when the replica serving a request died, was unreachable or
# refused it (its queue full): the request never ran to an answer, so it may be retried.
REPLICA_FAILURES = (RayActorError, WorkerCrashedError, NodeDiedError, ReplicaUnavailableError,
                    DeploymentUnavailableError, BackPressureError)


class PoolLost(Exception):
    """The pool's last replica left the StatsBoard while a request waited for its response."""

    def __init__(self, pool: str):
        super().__init__(f"the {pool} pool has no live replica")
        self.pool = pool


class PoolHealth:
    """Availability of each pool from request failures and the StatsBoard's replica list.

    Args:
        hold_s: seconds a pool stays unavailable after a failure (default: the board's staleness
            bound, by which a dead replica has left the board).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, hold_s: float = STALE_AFTER_S,
                 clock: Callable[[], float] = time.monotonic):
        self._hold_s, self._clock = hold_s, clock
        self._failed_until: dict[str, float] = {}
        self._seen: set[str] = set()  # pools the board has listed at least once
        self._live: dict[str, int] = {}

    def observe(self, snapshot: Mapping[str, PoolStats]) -> None:
        """Takes the board's latest view: live (reporting) replicas per pool."""
        self._live = {pool: p.replicas for pool, p in snapshot.items()}
        self._seen.update(pool for pool, n in self._live.items() if n > 0)

    def failed(self, pool: str) -> None:
        """A request to `pool` failed with one of REPLICA_FAILURES."""
        self._failed_until[pool] = self._clock() + self._hold_s

    def gone(self, pool: str) -> bool:
        """True while the board, having listed replicas of `pool`, lists none (all dead or
        restarting). Unlike `available`, one failed request does not make a pool gone: its
        other replicas may still serve."""
        return pool in self._seen and self._live.get(pool, 0) == 0

    def available(self, pool: str) -> bool:
        """False while `pool` is gone or within `hold_s` of a replica failure."""
        if self._clock() < self._failed_until.get(pool, 0.0):
            return False
        return not self.gone(pool)


async def await_unless_gone(work: Awaitable[Any], pool: str, health: PoolHealth, period_s: float,
                            release: Callable[[Any], Awaitable[None]] | None = None) -> Any:
    """The result of `work` (a request to `pool`), checking every `period_s` seconds that `pool`
    is not gone (`PoolHealth.gone`).

    Raises:
        PoolLost: `pool` went while `work` ran; `work` was cancelled first.
    Cancelling the caller cancels `work` too. Where `work` finishes anyway as it is cancelled,
    `release(result)` disposes of the result nobody will read.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=period_s)
            if done:
                return task.result()
            if health.gone(pool):
                raise PoolLost(pool)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            if release is not None and not task.cancelled() and task.exception() is None:
                await release(task.result())
