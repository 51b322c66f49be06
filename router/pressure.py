"""Pool pressure as one ingress replica sees it, with no blocking call on the request path.

The ingress counts its own requests' sequences in flight per pool exactly (`start`/`finish`; a
request of prompts × n sequences counts prompts × n); a background task
(`run`) pushes those counts to the application's StatsBoard and pulls the other ingress replicas'
counts and every pool replica's engine stats, every `PUSH_PERIOD_S` (0.5 s): the global view is at
most ~1 s stale, the local part is exact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Callable, Mapping

from core import Route
from core import PUSH_PERIOD_S, PoolStats
from router.policy import PoolLoad

logger = logging.getLogger("specserve.router")


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
