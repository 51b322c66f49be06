"""What the router knows of each pool now: sequences in flight (`PressureTracker`) and whether it
can take a request (`PoolHealth`), both from the application's StatsBoard, with no blocking call
on the request path.

Pressure: the ingress counts its own requests' sequences in flight per pool exactly
(`start`/`finish`; a request of prompts × n sequences counts prompts × n); a background task
(`run`) pushes those counts to the StatsBoard and pulls the other ingress replicas' counts and
every pool replica's engine stats, every `PUSH_PERIOD_S` (0.5 s): the global view is at most ~1 s
stale, the local part is exact.

Health: a pool is unavailable for `hold_s` after a request to it failed with a replica failure,
and for as long as the StatsBoard lists none of its replicas once it has listed some (every replica
dead or restarting: a replica reports only once its engine serves). The router sends an
unavailable pool's requests to the other pool (reason `pool_unavailable`) and takes the pool back
as soon as a replica reports again. A pool that autoscaling may take to zero (`min_replicas: 0`)
and that the board lists no replica of is `asleep`: it starts a replica when a request wants it
(router/ingress.py). A board that has just (re)started has not heard from every live replica yet:
for its first `STALE_AFTER_S`, a pool it lists no replica of keeps its previous state (unknown,
not gone).

A request already waiting on a pool whose last replica left the board is abandoned and retried on
the other pool (`PoolLost`, router/ingress.py): Serve's DeploymentHandle queues a request for a
deployment with no running replica until one starts (minutes for a vLLM engine; ray-project/ray
#40995), so a request caught between a replica's death and the board noticing would otherwise hang.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping

from ray.exceptions import NodeDiedError, RayActorError, WorkerCrashedError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, \
    ReplicaUnavailableError

from core import PUSH_PERIOD_S, STALE_AFTER_S, PoolStats, Route
from router.policy import PoolLoad

logger = logging.getLogger("specserve.router")

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
        scales_to_zero: pools whose autoscaling `min_replicas` is 0.
    """

    def __init__(self, hold_s: float = STALE_AFTER_S,
                 clock: Callable[[], float] = time.monotonic, scales_to_zero: Iterable[str] = ()):
        self._hold_s, self._clock = hold_s, clock
        self._scales_to_zero = set(scales_to_zero)
        self._failed_until: dict[str, float] = {}
        self._seen: set[str] = set()  # pools the board has listed at least once
        self._live: dict[str, int] = {}
        self._observed = False  # a first view has come in

    def observe(self, snapshot: Mapping[str, PoolStats], board_age_s: float = float("inf")
                ) -> None:
        """Takes the board's latest view: live (reporting) replicas per pool, from a board
        (re)started `board_age_s` seconds ago (`BoardSnapshot.age_s`)."""
        live = {pool: p.replicas for pool, p in snapshot.items()}
        if board_age_s < STALE_AFTER_S:  # a pool listed with none may not have reported yet
            live = {**self._live, **{pool: n for pool, n in live.items() if n > 0}}
        self._live = live
        self._seen.update(pool for pool, n in self._live.items() if n > 0)
        self._observed = True

    def failed(self, pool: str) -> None:
        """A request to `pool` failed with one of REPLICA_FAILURES."""
        self._failed_until[pool] = self._clock() + self._hold_s

    def gone(self, pool: str) -> bool:
        """True while the board, having listed replicas of `pool`, lists none (all dead or
        restarting). Unlike `available`, one failed request does not make a pool gone: its
        other replicas may still serve."""
        return pool in self._seen and self._live.get(pool, 0) == 0

    def asleep(self, pool: str) -> bool:
        """True while `pool` may scale to zero and the board lists none of its replicas (once
        a first view is in): scaled to zero, or its replicas all gone and none wanted."""
        return (pool in self._scales_to_zero and self._observed
                and self._live.get(pool, 0) == 0)

    def available(self, pool: str) -> bool:
        """False while `pool` is gone, asleep or within `hold_s` of a replica failure."""
        if self._clock() < self._failed_until.get(pool, 0.0):
            return False
        return not self.gone(pool) and not self.asleep(pool)


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


class PressureTracker:
    """Requests in flight per pool plus the latest StatsBoard snapshot.

    Args:
        board: the application's StatsBoard actor handle (None: local counts only).
        ingress_id: this ingress replica's id (its counts are excluded from the board's sum).
        configured_replicas: replicas per configured pool, used until the board reports.
    """

    def __init__(self, board, ingress_id: str, configured_replicas: Mapping[Route, int]):
        self._board = board
        self._ingress_id = ingress_id
        self._configured = dict(configured_replicas)
        self._local: dict[Route, int] = {pool: 0 for pool in configured_replicas}
        self.remote: dict[str, PoolStats] = {}
        self.board_age_s = float("inf")  # of the board when it gave `remote` (BoardSnapshot)

    def start(self, pool: Route, sequences: int = 1) -> None:
        """Counts a request of `sequences` sequences (prompts × n) in flight to `pool`."""
        self._local[pool] += sequences

    def finish(self, pool: Route, sequences: int = 1) -> None:
        """Releases what `start(pool, sequences)` counted."""
        self._local[pool] -= sequences

    def local_in_flight(self, pool: Route) -> int:
        return self._local[pool]

    def local_in_flight_all(self) -> dict[Route, int]:
        """This replica's (or batch driver's) own sequences in flight, per configured pool."""
        return dict(self._local)

    def pool_stats(self) -> dict[Route, PoolStats]:
        """Every configured pool's board view with in-flight requests of all ingress replicas."""
        out = {}
        for pool, configured in self._configured.items():
            seen = self.remote.get(pool) or PoolStats()
            out[pool] = dataclasses.replace(seen, replicas=seen.replicas or configured,
                                            in_flight=self._local[pool] + seen.in_flight)
        return out

    def loads(self) -> dict[Route, PoolLoad]:
        """Every configured pool's live replicas and in-flight requests (all ingress replicas).

        Until a pool's replicas report, its configured replica count stands in, and its sampling
        counts as not verified lossless.
        """
        return {pool: PoolLoad(p.replicas, p.in_flight, lossless_sampling=p.lossless_sampling)
                for pool, p in self.pool_stats().items()}

    async def run(self, on_snapshot: Callable[[dict[str, PoolStats]], None] | None = None) -> None:
        """Push local counts and pull the board's snapshot forever (cancel to stop).

        Args:
            on_snapshot: called with each new snapshot (e.g. to fold step-time samples).
        """
        while True:
            try:
                self._board.report_in_flight.remote(self._ingress_id, dict(self._local))
                snapshot = await self._board.snapshot.remote(self._ingress_id)
                self.remote, self.board_age_s = snapshot.pools, snapshot.age_s
                if on_snapshot is not None:
                    on_snapshot(self.remote)
            except Exception:  # the board restarts on failure; keep the last view meanwhile
                logger.exception("stats board unreachable")
            await asyncio.sleep(PUSH_PERIOD_S)
