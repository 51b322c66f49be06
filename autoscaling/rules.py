"""The autoscaling policy of both pools, as one pure function: `decide(views, cfg, state, now,
demand)`.

Given the observed offered load per request class (`demand`) and both pools' step-time models
(`PoolView.step_times`), the budget decides: the split (n_vanilla, n_speculative) with the best
predicted goodput within the TPOT SLO (autoscaling/budget.py, autoscaling/split.py). Without them
(no arrival rates wired yet, a pool never profiled) the per-pool rules below decide.

Each call sees every pool (`PoolView`: replicas, requests in flight, engine queue, memory-bound
fraction) and returns each pool's replica target with the reason, plus the state for the next call.
No clock, no I/O: Ray Serve's controller calls it through `autoscaling.controller.PoolAutoscaler`,
the trace simulator (`bench/autoscale_sim.py`) and the tests call it directly.

Per pool, with n running replicas, load L = requests in flight / n, queue Q = engine-waiting / n,
memory-bound fraction m (deployments/utilization.py), target load T (`target_ongoing_requests`):

| pool | condition | wants | reason |
| --- | --- | --- | --- |
| any | no replica, requests queued (scaled to zero) | 1, at once (no upscale delay) | `demand` |
| any | a running replica has not reported | hold | `metrics_missing` |
| any | Serve is still moving to the last target | hold | `scaling_in_progress` |
| speculative | L ≥ T and m ≥ memory_bound_high | max(n+1, ⌈nL/T⌉) | `memory_bound_demand` |
| speculative | (L ≥ T or Q ≥ Q_high) and m ≤ memory_bound_low | hold; vanilla +1 | `compute_bound` |
| speculative | L ≥ T or Q ≥ Q_high, m between the thresholds | hold | `hysteresis` |
| vanilla | Q ≥ Q_high / L ≥ T | max(n+1, ⌈nL/T⌉) | `queue_building` / `demand` |
| vanilla | speculative pool is compute-bound under load | n+1 | `shift_from_speculative` |
| any | nothing in flight, no output in the window | min_replicas | `drained` |
| any | nL / (n−1) ≤ downscale_load_fraction·T | ⌈nL / (fraction·T)⌉ | `underloaded` |
| any | otherwise | hold | `steady` |

Then min/max per pool, then the budget: Σ replicas × tensor_parallel_size ≤ budget_accelerators,
filled from each pool's minimum up, the pool that needs capacity most first (vanilla when queues
build or speculation is compute-bound, else speculative when it is memory-bound under demand), so a
growing pool can take replicas from the other (`budget_shift`) or be capped (`budget_cap`). Last,
the delays: a pool moves to its new size only after wanting it, in the same direction, for
`upscale_delay_s` / `downscale_delay_s`; until then it stays (the decision says `pending`).
"""

from __future__ import annotations

import math

from autoscaling.budget import decide_budget
from autoscaling.decision import PoolView, ScalingDecision
from autoscaling.goodput import Load
from core import AutoscalingConfig
from core.specdecode import MIN_SPEEDUP

POOLS = ("vanilla", "speculative")


def _wants(name: str, v: PoolView, cfg: AutoscalingConfig,
           spec_compute_bound: bool) -> tuple[int, str]:
    """(replicas wanted, reason) for one pool before bounds, budget and delays."""
    if v.replicas == 0:
        return (1, "demand") if v.ongoing > 0 else (v.target, "steady")
    if v.memory_bound is None or v.waiting is None:
        return v.target, "metrics_missing"
    if v.target != v.replicas:
        return v.target, "scaling_in_progress"
    n, target_load = v.replicas, cfg.target_ongoing_requests
    loaded = v.ongoing / n >= target_load
    queued = v.waiting / n >= cfg.queue_per_replica_high
    grow = max(n + 1, math.ceil(v.ongoing / target_load))
    if name == "speculative":
        if loaded and v.memory_bound >= cfg.memory_bound_high:
            return grow, "memory_bound_demand"
        if (loaded or queued) and v.memory_bound <= cfg.memory_bound_low:
            return n, "compute_bound"
        if loaded or queued:
            return n, "hysteresis"
    else:
        if loaded or queued:
            return grow, "queue_building" if queued else "demand"
        if spec_compute_bound:
            return n + 1, "shift_from_speculative"
    if v.ongoing <= 0 and not v.busy:
        return 0, "drained"  # raised to min_replicas by the bounds
    down_load = cfg.downscale_load_fraction * target_load
    if n > 1 and v.ongoing / (n - 1) <= down_load:
        return max(1, math.ceil(v.ongoing / down_load)), "underloaded"
    return n, "steady"


def _fit_budget(wanted: dict[str, int], reasons: dict[str, str], views: dict[str, PoolView],
                cfg: AutoscalingConfig, order: list[str]) -> None:
    """Caps `wanted` in place so Σ replicas × tp ≤ budget; fills minimums, then `order`."""
    alloc = {p: cfg.pool(p).min_replicas for p in wanted}
    free = cfg.budget_accelerators - sum(alloc[p] * views[p].tensor_parallel_size for p in wanted)
    for p in order:
        tp = views[p].tensor_parallel_size
        extra = max(0, min(wanted[p] - alloc[p], free // tp))
        alloc[p] += extra
        free -= extra * tp
    for p in wanted:
        if alloc[p] < wanted[p]:
            reasons[p] = "budget_shift" if alloc[p] < views[p].target else "budget_cap"
            wanted[p] = alloc[p]


def decide(views: dict[str, PoolView], cfg: AutoscalingConfig, state: dict, now: float,
           demand: list[Load] | None = None, min_speedup: float = MIN_SPEEDUP,
           ) -> tuple[dict[str, ScalingDecision], dict]:
    """Replica targets of every pool in `views` (module doc), and the next state.

    Args:
        views: per pool ("vanilla" / "speculative") its view this tick; absent pools are not served.
        cfg: the autoscaling section of the config.
        state: what the previous call returned ({} at first); JSON-serializable, one entry per
            pool (Serve keeps each deployment's policy state apart).
        now: seconds on any monotonic clock, the same for every call.
        demand: the observed offered load per request class; with it, and both pools' step
            times, the budget split decides (autoscaling/budget.py); None: the per-pool rules.
        min_speedup: the router's threshold on S (router.min_speedup), for the split's routing.

    Returns:
        ({pool: ScalingDecision}, new state).
    """
    if demand is not None and set(views) == set(POOLS) and all(
            v.step_times for v in views.values()):
        return decide_budget(views, demand, cfg, state, now, min_speedup)
    spec = views.get("speculative")
    spec_compute_bound = False
    wanted, reasons = {}, {}
    if spec is not None:
        wanted["speculative"], reasons["speculative"] = _wants("speculative", spec, cfg, False)
        spec_compute_bound = reasons["speculative"] == "compute_bound"
    if "vanilla" in views:
        wanted["vanilla"], reasons["vanilla"] = _wants("vanilla", views["vanilla"], cfg,
                                                       spec_compute_bound)
    for p in wanted:
        bounds = cfg.pool(p)
        wanted[p] = min(max(wanted[p], bounds.min_replicas), bounds.max_replicas)
    vanilla_first = spec_compute_bound or reasons.get("vanilla") == "queue_building" or (
        reasons.get("speculative") != "memory_bound_demand")
    order = [p for p in (POOLS if vanilla_first else POOLS[::-1]) if p in wanted]
    _fit_budget(wanted, reasons, views, cfg, order)

    decisions, new_state = {}, {}
    for p, v in views.items():
        if wanted[p] == v.target:
            decisions[p] = ScalingDecision(v.target, v.target, reasons[p], v.target)
            new_state[p] = {"reason": reasons[p]}
            continue
        direction = "up" if wanted[p] > v.target else "down"
        delay = cfg.upscale_delay_s if direction == "up" else cfg.downscale_delay_s
        if direction == "up" and v.replicas == 0 and v.target == 0:
            delay = 0.0  # from zero a request is waiting: start at once (as Serve's own policy)
        prev = state.get(p, {})
        since = prev["since"] if prev.get("direction") == direction else now
        if now - since >= delay:
            decisions[p] = ScalingDecision(wanted[p], wanted[p], reasons[p], v.target)
            new_state[p] = {"reason": reasons[p]}
        else:
            decisions[p] = ScalingDecision(v.target, wanted[p], reasons[p], v.target, pending=True)
            new_state[p] = {"reason": reasons[p], "direction": direction, "since": since}
    return decisions, new_state
