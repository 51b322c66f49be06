"""`PoolAutoscaler`: the application-level autoscaling policy Ray Serve 2.60's controller calls.

Ray Serve calls an application's `autoscaling_policy` every control-loop tick (0.1 s) with one
`AutoscalingContext` per autoscaled deployment, here both pools, and applies the returned replica
counts (after each deployment's min/max; specserve sets Serve's own delays to 0 and keeps its
delays in the policy). This class only translates: contexts → `PoolView`s → the pure
`deployments.autoscaling.decide` → replica counts. It is a class so that Serve instantiates it
once with `policy_kwargs` (the JSON config) and its recorder lives across ticks.

Replicas report `waiting`, `busy` and `memory_bound` through `record_autoscaling_stats`
(deployments/pools.py); Serve averages them over `look_back_period_s` per replica
(`ctx.aggregated_metrics`). A running replica with no report yet makes its pool hold.

Every invocation counts; every change of a pool's target or reason is logged with its reason
(logger `ray.serve`, so it lands in the controller's log), counted in
`specserve_autoscaling_decisions_total{pool,reason,action}` (Ray metrics, exported by Ray's
metrics agent with Ray's `ray_` prefix), and kept on the application's StatsBoard
(`StatsBoard.autoscaler()`), which is what tests read to prove the policy runs. Each tick also
sets `specserve_autoscaling_memory_bound{pool}` (Ray metrics), the fraction the policy saw.
"""

from __future__ import annotations

import logging
import time

import ray
from ray.util.metrics import Counter, Gauge

from core import AutoscalingConfig, get_board
from deployments.autoscaling import Decision, PoolView, decide

logger = logging.getLogger("ray.serve")

WAITING_METRIC = "specserve_waiting"  # requests waiting in the replica's engine
BUSY_METRIC = "specserve_busy"  # 1.0: the engine produced output since the last report
MEMORY_BOUND_METRIC = "specserve_memory_bound"  # memory-bound fraction, 0..1
_STATE_KEY = "specserve"
_BOARD_PERIOD_S = 1.0


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
    """

    def __init__(self, config: dict, tensor_parallel_size: dict[str, int]):
        self._cfg = AutoscalingConfig.model_validate(config)
        self._tp = dict(tensor_parallel_size)
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
        decisions, new_state = decide(views, self._cfg, state, now or time.time())
        self._record(decisions, views, contexts)
        return ({dep_id: decisions[p].replicas for p, (dep_id, _) in by_pool.items()},
                {dep_id: {_STATE_KEY: new_state[p]} for p, (dep_id, _) in by_pool.items()})

    def _record(self, decisions: dict[str, Decision], views: dict[str, PoolView],
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
            logger.info("specserve autoscaling: %s %s %d -> %d (wanted %d, reason %s%s; "
                        "running %d, in flight %.1f, waiting %s, memory-bound %s; predicted %s)",
                        pool, d.action, d.previous, d.replicas, d.wanted, d.reason,
                        ", pending delay" if d.pending else "", v.replicas, v.ongoing,
                        v.waiting, v.memory_bound, d.gain)
            if ray.is_initialized():  # inside Serve's controller; not in pure tests
                self._count(pool, d)
        if ray.is_initialized():
            self._gauge(views)
            self._publish(contexts)

    def _count(self, pool: str, d: Decision) -> None:
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
            if self._board is None:
                app = next(iter(contexts)).app_name
                self._board = get_board(app)
            self._board.report_autoscaler.remote(self._calls, self._events)
            self._events = []
        except Exception:
            logger.exception("specserve autoscaling: stats board unreachable")

    @property
    def calls(self) -> int:
        """Invocations so far."""
        return self._calls

