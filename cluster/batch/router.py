"""Route decisions for batch rows: the online policy (`router.policy.choose_route`) in
throughput mode.

The ingress asks, per request, which path serves *this request* faster: it passes each pool's step
time at the batch the request would join, T(B + 1), and the policy computes
S = E[τ] · T_v(B_v + 1) / T_s(B_s + 1). A batch job has no waiting user: it asks which path adds
more *tokens per second to the whole job*. With R(n) = n / T(n / replicas) the sequence-steps per
second of a pool holding n sequences, one more row adds ΔR = R(n + 1) − R(n) (0 once the pool
holds max_num_seqs per replica: the row would queue), so the policy gets the marginal step time
1 / ΔR in place of T(B + 1) and the same comparison reads S = E[τ] · ΔR_s / ΔR_v: a row goes
speculative when it adds more tokens there. The batch pressure a job creates by design thus keeps
the rows that gain most from speculation on that path while the speculative pool still adds
throughput, and spills the others to the vanilla pool. ΔR comes from the measured step times
(startup profile, then busy-window samples) smoothed into a concave throughput curve
(`marginal_step_s`); when neither pool adds throughput it falls back to the online step times.

Everything else is the online router's (`router.decider.RouteDecider`): request validation, features
and task classifier, acceptance learned from each speculative response, hysteresis, pins, requested
routes. The driver joins the application's StatsBoard as one more ingress: it reports its rows in
flight (the online router sees the job's pressure), and every `PUSH_PERIOD_S` it publishes the
acceptance counts it learned and takes the other ingresses' counts and the runtime pin
(`PUT /admin/policy`) from it, as ingress replicas do (`RouteDecider.share_forever`). The board
keeps a driver's counts while it runs (they expire `STALE_AFTER_S` after it ends, as a stopped
ingress replica's do).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from typing import Mapping

from core import Route, SpecserveConfig
from router.decider import RouteDecider
from router.policy import Decision, PoolLoad, RequestFeatures
from router.pressure import PressureTracker


def marginal_step_s(points: Mapping[float, float], in_flight: int, replicas: int,
                    max_num_seqs: int) -> float | None:
    """1 / ΔR: seconds per sequence-step that one more sequence adds to a pool's throughput.

    R(n) is known at the profiled batches only, and noisily (a busy machine makes some steps slow
    at random); a difference of two noisy rates could swing the decision either way. So ΔR is the
    slope of the least concave majorant of the known points (0, 0), (n_i, R(n_i)): throughput
    with diminishing returns, never a negative or exploding gain inside the measured range. Beyond
    the largest known batch the last slope continues.

    Args:
        points: {per-replica running batch: seconds per engine step} known for the pool
            (router.cost.StepTimeModel.points()).
        in_flight: sequences the pool holds now (running or queued).
        replicas: live replicas.
        max_num_seqs: running-batch cap per replica (a sequence beyond it queues: no gain).

    Returns:
        None before any step time is known; `math.inf` when one more adds nothing.
    """
    replicas = max(replicas, 1)
    curve = [(0.0, 0.0)] + [(b * replicas, b * replicas / step_s)
                            for b, step_s in sorted(points.items()) if b <= max_num_seqs]
    if len(curve) == 1:
        return None
    if in_flight + 1 > max_num_seqs * replicas:
        return math.inf
    hull: list[tuple[float, float]] = []
    for p in curve:  # upper hull, points sorted by batch
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()
        hull.append(p)
    segments = list(zip(hull, hull[1:]))
    (x0, y0), (x1, y1) = next((seg for seg in segments if in_flight < seg[1][0]), segments[-1])
    gain = (y1 - y0) / (x1 - x0)
    return 1.0 / gain if gain > 0 else math.inf


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    """> 0 when `a` lies below the line from `o` to `b`."""
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


class BatchRouter:
    """Chooses the pool of each batch row and learns from the answers.

    Args:
        cfg: the application's config.
        pools: the pools the application runs.
        board: its StatsBoard actor (None: local counts only, no step times).
        driver_id: this driver's id on the board.
    """

    def __init__(self, cfg: SpecserveConfig, pools: list[Route], board, driver_id: str):
        self._cfg = cfg
        self._pools = pools
        self._pressure = PressureTracker(board, driver_id,
                                         {p: getattr(cfg, p).num_replicas for p in pools})
        self._decider = RouteDecider(cfg, pools, generation=None)  # the live build's pin
        self.estimator = self._decider.estimator
        self._board = board
        self._driver_id = driver_id
        self._snapshot_seen = asyncio.Event()
        self._state_seen = asyncio.Event()
        if board is None:
            self._state_seen.set()

    async def run(self) -> None:
        """Until cancelled: reports this driver's rows in flight and pulls pool stats; publishes
        its acceptance counts and takes the runtime pin and the other ingresses' counts."""
        jobs = [self._pressure.run(on_snapshot=self._on_snapshot)]
        if self._board is not None:
            jobs.append(self._decider.share_forever(self._board, self._driver_id,
                                                    on_state=self._state_seen.set))
        await asyncio.gather(*jobs)

    def _on_snapshot(self, pools) -> None:
        self.estimator.update_pools(pools)
        self._snapshot_seen.set()

    async def wait_for_stats(self, timeout_s: float) -> None:
        """Returns once the first StatsBoard snapshot (the pools' step-time profiles) and router
        state (the runtime pin, shared acceptance) are in, or after `timeout_s`: rows routed
        before would see no step times and the config's pin."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(self._snapshot_seen.wait(),
                                                  self._state_seen.wait()), timeout_s)

    def loads(self) -> dict[Route, PoolLoad]:
        """Each pool's load with its marginal step time (throughput mode)."""
        loads = self._pressure.loads()
        marginal = {}
        for pool, load in loads.items():
            model = self.estimator.step_times.get(pool)
            marginal[pool] = marginal_step_s(model.points() if model else {}, load.in_flight,
                                             load.replicas, getattr(self._cfg, pool).max_num_seqs)
        if all(m == math.inf for m in marginal.values()):  # both saturated: online step times
            marginal = {pool: self.estimator.step_time(pool, (load.in_flight + 1) /
                                                       max(load.replicas, 1))
                        for pool, load in loads.items()}
        return {pool: dataclasses.replace(load, step_s=marginal[pool])
                for pool, load in loads.items()}

    def validate(self, body) -> int:
        """The online validation of one row's request (`RouteDecider.validate`).

        Returns:
            The prompt's length in tokens, for `decide`.

        Raises:
            RequestError: 400 naming the field, as the ingress answers.
        """
        return self._decider.validate(body)

    def decide(self, body, prompt_len: int | None = None) -> tuple[RequestFeatures, Decision]:
        """Features and route of one row's request (pops its `route` field).

        Args:
            body: the row's request.
            prompt_len: its prompt tokens from `validate` (None: counted where it matters).

        Raises:
            RequestError: the `route` field is invalid.
            Unroutable: no pool the application runs may take the row (router/policy.py).
        """
        return self._decider.decide(body, self.loads(), prompt_len)

    def start(self, route: Route) -> None:
        self._pressure.start(route)

    def finish(self, route: Route) -> None:
        self._pressure.finish(route)

    def in_flight(self) -> dict[Route, int]:
        """This driver's rows in flight per pool."""
        return {pool: self._pressure.local_in_flight(pool) for pool in self._pools}

    def learn(self, features: RequestFeatures, body: dict) -> None:
        """Folds a speculative response's acceptance histogram into the estimates."""
        self._decider.learn(features, body)
