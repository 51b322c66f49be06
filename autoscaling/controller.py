"""`PoolAutoscaler`: the application-level autoscaling policy Ray Serve 2.60's controller calls.

Ray Serve calls an application's `autoscaling_policy` every control-loop tick (0.1 s) with one
`AutoscalingContext` per autoscaled deployment, here both pools, and applies the returned replica
counts (after each deployment's min/max; specserve sets Serve's own delays to 0 and keeps its
delays in the policy). This class only translates: contexts → `PoolView`s → the pure
`autoscaling.rules.decide` → replica counts. It is a class so that Serve instantiates it
once with `policy_kwargs` (the JSON config) and its recorder lives across ticks.

Replicas report `waiting`, `busy` and `memory_bound` through `record_autoscaling_stats`
(deployments/pools.py); Serve averages them over `look_back_period_s` per replica
(`ctx.aggregated_metrics`). A running replica with no report yet makes its pool hold.

With `autoscaling.policy: budget` the policy also takes, from the application's StatsBoard, the
offered load per request class the routers observed over `demand_window_s` and each pool's
step-time model (profiles, then served samples: `StatsBoard.autoscaling_inputs`), and `decide`
runs the budget split. The board is asked without blocking Serve's control loop: at most every
`_BOARD_PERIOD_S` a request goes out, and a tick uses the newest answer that has arrived (none
older than `_INPUTS_STALE_S`: the rules decide meanwhile).

Every invocation counts; every change of a pool's target or reason is logged with its reason
(logger `ray.serve`, so it lands in the controller's log), counted in
`specserve_autoscaling_decisions_total{pool,reason,action}` (Ray metrics, exported by Ray's
metrics agent with Ray's `ray_` prefix), and kept on the application's StatsBoard
(`StatsBoard.autoscaler()`), which is what tests read to prove the policy runs. Each tick also
sets `specserve_autoscaling_memory_bound{pool}` (Ray metrics), the fraction the policy saw.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import ray
from ray.util.metrics import Counter, Gauge

from autoscaling.decision import PoolView, ScalingDecision
from autoscaling.goodput import Load
from autoscaling.rules import decide
from core import AutoscalingConfig
from core.specdecode import MIN_SPEEDUP
from core.stats import BUSY_METRIC, MEMORY_BOUND_METRIC, WAITING_METRIC
from router.board import get_board

logger = logging.getLogger("ray.serve")

_STATE_KEY = "specserve"
_BOARD_PERIOD_S = 1.0
_INPUTS_STALE_S = 10.0  # an answer of the board older than this is not used


def _mean_over_running(ctx, name: str) -> tuple[float, int] | None:
    """(sum, count) of metric `name` over the running replicas; None if one has not reported."""
    per_replica = (ctx.aggregated_metrics or {}).get(name, {})
    values = [per_replica.get(r) for r in ctx.running_replicas]
    if any(v is None for v in values):
        return None
    return sum(values), len(values)


def pool_view(ctx, tensor_parallel_size: int) -> PoolView:
    """One pool's `PoolView` from its Serve `AutoscalingContext`."""
    waiting = _mean_over_running(ctx, WAITING_METRIC)
    mem = _mean_over_running(ctx, MEMORY_BOUND_METRIC)
    busy = _mean_over_running(ctx, BUSY_METRIC)
    return PoolView(
        replicas=ctx.current_num_replicas, target=ctx.target_num_replicas,
        ongoing=float(ctx.total_num_requests),
        waiting=None if waiting is None else waiting[0],
        memory_bound=None if mem is None or mem[1] == 0 else mem[0] / mem[1],
        tensor_parallel_size=tensor_parallel_size,
        busy=None if busy is None or busy[1] == 0 else busy[0] / busy[1])


class PoolAutoscaler:
    """Serve application-level policy: `(contexts) -> (replicas per deployment, state)`.

    Args:
        config: the `autoscaling` section (`AutoscalingConfig.model_dump(mode="json")`).
        tensor_parallel_size: {pool name: accelerators per replica}.
        max_num_seqs: {pool name: its engines' running-batch cap} (the split's curves).
        min_speedup: the router's threshold on S, which the split routes by.
    """

    def __init__(self, config: dict, tensor_parallel_size: dict[str, int],
                 max_num_seqs: dict[str, int] | None = None, min_speedup: float = MIN_SPEEDUP):
        self._cfg = AutoscalingConfig.model_validate(config)
        self._tp = dict(tensor_parallel_size)
        self._max_num_seqs = dict(max_num_seqs or {})
        self._min_speedup = min_speedup
        self._inputs_ref = None  # the board's answer on its way
        self._inputs: tuple[float, dict] | None = None  # (when it arrived, the answer)
        self._inputs_t = 0.0  # when the last request went out
        self._calls = 0
        self._last: dict[str, tuple[int, str]] = {}
        self._events: list[dict] = []
        self._board = None
        self._board_t = 0.0
        self._counter = None
        self._memory_bound = None

    def __call__(self, contexts: dict) -> tuple[dict, dict]:
        self._calls += 1
        by_pool = {dep_id.name: (dep_id, ctx) for dep_id, ctx in contexts.items()
                   if dep_id.name in self._tp}
        views = {p: pool_view(ctx, self._tp[p]) for p, (_, ctx) in by_pool.items()}
        state = {p: ctx.policy_state.get(_STATE_KEY, {}) for p, (_, ctx) in by_pool.items()}
        now = next((ctx.current_time for _, ctx in by_pool.values() if ctx.current_time), None)
        fed, demand = self.with_inputs(views, self._board_inputs(contexts))
        try:
            decisions, new_state = decide(fed, self._cfg, state, now or time.time(), demand,
                                          self._min_speedup)
        except Exception:  # the split must never stop Serve's control loop: the rules decide
            if demand is None:
                raise
            logger.exception("specserve autoscaling: budget split failed; the rules decide")
            decisions, new_state = decide(views, self._cfg, state, now or time.time())
        self._record(decisions, views, contexts)
        return ({dep_id: decisions[p].replicas for p, (dep_id, _) in by_pool.items()},
                {dep_id: {_STATE_KEY: new_state[p]} for p, (dep_id, _) in by_pool.items()})

    def with_inputs(self, views: dict[str, PoolView], inputs: dict | None
                    ) -> tuple[dict[str, PoolView], list[Load] | None]:
        """The views with each pool's step times and batch cap, and the demand, from the
        board's `autoscaling_inputs` answer; (views, None) without one (the rules decide)."""
        if inputs is None or inputs.get("demand") is None:
            return views, None
        steps = inputs.get("step_times") or {}
        views = {p: dataclasses.replace(
            v, step_times=tuple(sorted((int(b), float(s)) for b, s in steps.get(p, {}).items())),
            max_num_seqs=self._max_num_seqs.get(p)) for p, v in views.items()}
        demand = [Load(d["tokens_per_s"], d["expected_tokens"], d["gains"])
                  for d in inputs["demand"]]
        return views, demand

    def _board_inputs(self, contexts: dict) -> dict | None:
        """The newest `StatsBoard.autoscaling_inputs` answer under `policy: budget`, asking
        again at most every `_BOARD_PERIOD_S` without waiting; None: rules policy, outside Ray,
        or no fresh answer."""
        if self._cfg.policy != "budget" or not ray.is_initialized():
            return None
        now = time.monotonic()
        try:
            if self._inputs_ref is not None:
                ready, _ = ray.wait([self._inputs_ref], timeout=0)
                if ready:
                    ref, self._inputs_ref = self._inputs_ref, None
                    self._inputs = (now, ray.get(ref))
            if self._inputs_ref is None and now - self._inputs_t >= _BOARD_PERIOD_S:
                self._inputs_t = now
                self._inputs_ref = self._get_board(contexts).autoscaling_inputs.remote(
                    self._cfg.demand_window_s, self._max_num_seqs)
        except Exception:  # the board restarts on failure; the rules decide meanwhile
            logger.exception("specserve autoscaling: stats board unreachable")
            self._inputs_ref = None
        if self._inputs is None or now - self._inputs[0] > _INPUTS_STALE_S:
            return None
        return self._inputs[1]

    def _get_board(self, contexts: dict):
        if self._board is None:
            self._board = get_board(next(iter(contexts)).app_name)
        return self._board

    def _record(self, decisions: dict[str, ScalingDecision], views: dict[str, PoolView],
                contexts: dict) -> None:
        for pool, d in decisions.items():
            key = (d.replicas, d.reason if not d.pending else f"{d.reason}:pending")
            if self._last.get(pool) == key:
                continue
            self._last[pool] = key
            v = views[pool]
            event = {"t": time.time(), "pool": pool, "action": d.action, "reason": d.reason,
                     "pending": d.pending, "previous": d.previous, "replicas": d.replicas,
                     "wanted": d.wanted, "running": v.replicas, "ongoing": round(v.ongoing, 2),
                     "waiting": v.waiting, "memory_bound": v.memory_bound, "gain": d.gain}
            self._events.append(event)
            # A hold that only changes its reason (an idle pool between `drained` and `steady`)
            # is kept in the events and the counter, not printed: at INFO every 2-10 s it
            # scrolled `specserve serve`'s ready message and curl away (a new user's trial).
            log = logger.info if d.replicas != d.previous or d.pending else logger.debug
            log("specserve autoscaling: %s %s %d -> %d (wanted %d, reason %s%s; "
                "running %d, in flight %.1f, waiting %s, memory-bound %s; predicted %s)",
                pool, d.action, d.previous, d.replicas, d.wanted, d.reason,
                ", pending delay" if d.pending else "", v.replicas, v.ongoing,
                v.waiting, v.memory_bound, d.gain)
            if ray.is_initialized():  # inside Serve's controller; not in pure tests
                self._count(pool, d)
        if ray.is_initialized():
            self._gauge(views)
            self._publish(contexts)

    def _count(self, pool: str, d: ScalingDecision) -> None:
        try:
            if self._counter is None:
                self._counter = Counter("specserve_autoscaling_decisions_total",
                                        "Autoscaling decisions by pool, reason and action.",
                                        tag_keys=("pool", "reason", "action"))
            self._counter.inc(tags={"pool": pool, "reason": d.reason,
                                    "action": "pending" if d.pending else d.action})
        except Exception:  # metrics must never stop the control loop
            logger.exception("specserve autoscaling: metric export failed")

    def _gauge(self, views: dict[str, PoolView]) -> None:
        """Sets `specserve_autoscaling_memory_bound{pool}` to the fraction the policy saw this
        tick (unset while a running replica has not reported one)."""
        try:
            if self._memory_bound is None:
                self._memory_bound = Gauge("specserve_autoscaling_memory_bound",
                                           "Mean memory-bound fraction of the pool's replicas "
                                           "as the autoscaling policy saw it, 0..1.",
                                           tag_keys=("pool",))
            for pool, v in views.items():
                if v.memory_bound is not None:
                    self._memory_bound.set(v.memory_bound, tags={"pool": pool})
        except Exception:  # metrics must never stop the control loop
            logger.exception("specserve autoscaling: metric export failed")

    def _publish(self, contexts: dict) -> None:
        """Pushes calls and new events to the StatsBoard at most every `_BOARD_PERIOD_S`."""
        now = time.monotonic()
        if now - self._board_t < _BOARD_PERIOD_S:
            return
        self._board_t = now
        try:
            self._get_board(contexts).report_autoscaler.remote(self._calls, self._events)
            self._events = []
        except Exception:
            logger.exception("specserve autoscaling: stats board unreachable")

    @property
    def calls(self) -> int:
        """Invocations so far."""
        return self._calls

