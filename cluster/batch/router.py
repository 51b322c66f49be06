"""Route decisions for batch rows: the online router's `RouteDecider` priced by throughput.

The ingress asks, per request, which path serves *this request* faster; a batch job has no waiting
user and asks which path adds more *tokens per second to the whole job*: the decider's
`pricing="throughput"` (router/speedup.py `ThroughputSpeedup`, S = E[τ] · ΔR_s / ΔR_v) sends a row
speculative when it adds more tokens there. The batch pressure a job creates by design thus keeps
the rows that gain most from speculation on that path while the speculative pool still adds
throughput, and spills the others to the vanilla pool.

Everything else is the online router's: request validation, features and task classifier,
acceptance learned from each speculative response, hysteresis, pins, requested routes. The driver
joins the application's StatsBoard as one more ingress (`RouteDecider.run`): it reports its rows in
flight (the online router sees the job's pressure), publishes the acceptance counts it learned and
takes the other ingresses' counts and the runtime pin (`PUT /admin/policy`) from it. The board
keeps a driver's counts while it runs (they expire `STALE_AFTER_S` after it ends, as a stopped
ingress replica's do).
"""

from __future__ import annotations

import asyncio
import contextlib

from core import Route, SpecserveConfig
from router.decider import RouteDecider
from router.policy import PoolLoad, RequestFeatures, RouteDecision


class BatchRouter:
    """Chooses the pool of each batch row and learns from the answers.

    Args:
        cfg: the application's config.
        pools: the pools the application runs.
        board: its StatsBoard actor (None: local counts only, no step times).
        driver_id: this driver's id on the board.
    """

    def __init__(self, cfg: SpecserveConfig, pools: list[Route], board, driver_id: str):
        self._pools = pools
        self.decider = RouteDecider(cfg, pools, generation=None, board=board,  # the live build's pin
                                    replica_id=driver_id, pricing="throughput")
        self.speedup_model = self.decider.speedup_model
        self._snapshot_seen = asyncio.Event()
        self._state_seen = asyncio.Event()
        if board is None:
            self._state_seen.set()

    async def run(self) -> None:
        """Until cancelled: reports this driver's rows in flight and pulls pool stats; publishes
        its acceptance counts and takes the runtime pin and the other ingresses' counts."""
        await self.decider.run(on_snapshot=self._snapshot_seen.set,
                               on_state=self._state_seen.set)

    async def wait_for_stats(self, timeout_s: float) -> None:
        """Returns once the first StatsBoard snapshot (the pools' step-time profiles) and router
        state (the runtime pin, shared acceptance) are in, or after `timeout_s`: rows routed
        before would see no step times and the config's pin."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(self._snapshot_seen.wait(),
                                                  self._state_seen.wait()), timeout_s)

    def loads(self) -> dict[Route, PoolLoad]:
        """Each pool's live replicas and sequences in flight."""
        return self.decider.loads()

    def validate(self, body) -> int:
        """The online validation of one row's request (`RouteDecider.validate`).

        Returns:
            The prompt's length in tokens, for `decide`.

        Raises:
            RequestError: 400 naming the field, as the ingress answers.
        """
        return self.decider.validate(body)

    def decide(self, body, prompt_len: int | None = None) -> tuple[RequestFeatures, RouteDecision]:
        """Features and route of one row's request (pops its `route` field).

        Args:
            body: the row's request.
            prompt_len: its prompt tokens from `validate` (None: counted where it matters).

        Raises:
            RequestError: the `route` field is invalid.
            Unroutable: no pool the application runs may take the row (router/policy.py).
        """
        return self.decider.decide(body, prompt_len=prompt_len)

    def start(self, route: Route) -> None:
        self.decider.pressure.start(route)

    def finish(self, route: Route) -> None:
        self.decider.pressure.finish(route)

    def in_flight(self) -> dict[Route, int]:
        """This driver's rows in flight per pool."""
        return {pool: self.decider.pressure.local_in_flight(pool) for pool in self._pools}

    def learn(self, features: RequestFeatures, body: dict) -> None:
        """Folds a speculative response's acceptance histogram into the estimates."""
        self.decider.learn(features, body)
