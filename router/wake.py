"""Waking a pool that autoscaling took to zero replicas, from the ingress.

Serve counts a request waiting at a deployment with no replica as demand, and the autoscaling
policy then starts one (autoscaling/rules.py). The ingress makes a pool it wants count so by
queueing one `PoolServer.wake` call at the pool's handle, and waits until the StatsBoard lists a
replica of it (`PoolHealth.asleep` turns False), at most `autoscaling.scale_from_zero_wait_s`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable

from ray.serve.handle import DeploymentHandle

from core import PUSH_PERIOD_S, Route
from router.decider import PoolHealth

logger = logging.getLogger("specserve.router")


class PoolWaker:
    """One wake call per pool at a time; waits for a replica to report.

    Args:
        handles: each pool's DeploymentHandle.
        health: the ingress's pool health (who is asleep).
        wait_s: most seconds `wait_awake` waits (`autoscaling.scale_from_zero_wait_s`).
        on_wake: called with the pool at each wake call sent (metrics).
    """

    def __init__(self, handles: dict[str, DeploymentHandle], health: PoolHealth, wait_s: float,
                 on_wake: Callable[[Route], None]):
        self._handles = {pool: h.options(method_name="wake") for pool, h in handles.items()}
        self._health, self._wait_s, self._on_wake = health, wait_s, on_wake
        self._calls: dict[Route, asyncio.Future] = {}  # pool -> its wake call in flight

    def wake(self, pool: Route) -> None:
        """Makes `pool` count as demand; a call already in flight for it is kept. The call ends
        when a replica answers it."""
        if pool in self._calls and not self._calls[pool].done():
            return
        self._on_wake(pool)
        logger.info(json.dumps({"event": "wake", "route": pool}))

        async def call() -> None:
            try:
                await self._handles[pool].remote()
            except Exception as e:  # the next request that wants the pool wakes it again
                logger.warning(json.dumps({"event": "wake_failed", "route": pool,
                                           "error": type(e).__name__}))

        self._calls[pool] = asyncio.ensure_future(call())

    async def wait_awake(self, pool: Route) -> float | None:
        """Wakes `pool` and waits until the StatsBoard lists a replica of it, at most `wait_s`.

        Returns:
            Seconds waited, or None on timeout.
        """
        self.wake(pool)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while self._health.asleep(pool):
            if loop.time() - t0 >= self._wait_s:
                return None
            await asyncio.sleep(PUSH_PERIOD_S)
        return loop.time() - t0
