"""Which pools can take a request now, and which failures mean "this replica is gone".

A pool is unavailable for `hold_s` after a request to it failed with a replica failure, and for as
long as the StatsBoard lists none of its replicas once it has listed some (every replica dead or
restarting: a replica reports only once its engine serves). The router sends an unavailable pool's
requests to the other pool (reason `pool_unavailable`) and takes the pool back as soon as a replica
reports again.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from ray.exceptions import NodeDiedError, RayActorError, WorkerCrashedError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, \
    ReplicaUnavailableError

from deployments.stats import STALE_AFTER_S, PoolStats

# What a DeploymentHandle raises when the replica serving a request died, was unreachable or
# refused it (its queue full): the request never ran to an answer, so it may be retried.
REPLICA_FAILURES = (RayActorError, WorkerCrashedError, NodeDiedError, ReplicaUnavailableError,
                    DeploymentUnavailableError, BackPressureError)


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

    def available(self, pool: str) -> bool:
        if self._clock() < self._failed_until.get(pool, 0.0):
            return False
        return pool not in self._seen or self._live.get(pool, 0) > 0
