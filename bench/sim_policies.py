"""The autoscaling policies the simulator (bench/autoscale_sim.py) compares, besides static splits.

- `specserve`: `autoscaling.rules.decide`, the function Serve's controller calls, given the
  observed arrivals per task type (tokens/s over `autoscaling.demand_window_s`) and both pools'
  step-time models: the budget split (autoscaling/budget.py).
- `queue_length_policy`: Ray Serve's default (`replica_queue_length_autoscaling_policy`,
  ray/serve/autoscaling_policy.py): each pool on its own wants ⌈in-flight /
  target_ongoing_requests⌉, bounded, applied after the same-direction delay; no shared budget
  (replicas beyond it wait for free accelerators).
- `dynamo_planner`: a throughput-based planner after NVIDIA Dynamo's SLA planner (docs.nvidia.com/
  dynamo, "Planner Guide" / "Planner Design", v1.x: every adjustment interval it predicts the next
  interval's load and sets decode replicas = ⌈predicted load / per-replica capacity at the ITL
  target from pre-deployment profiling⌉, scaled down proportionally to a GPU budget). Modelled
  here per pool: constant predictor (next interval = the last one's output tokens/s to the pool),
  capacity at the TPOT SLO from the pool's profile, the speculative pool's ITL discounted by one
  global acceptance length (`Scenario.global_expected_tokens`) for every request, interval
  `DYNAMO_INTERVAL_S`. Which pool a request goes to stays the router's.
"""

from __future__ import annotations

import math

from autoscaling.decision import PoolView
from autoscaling.goodput import Load, PoolCurve
from autoscaling.rules import decide
from core import AutoscalingConfig
from deployments.utilization import memory_bound_fraction

DYNAMO_INTERVAL_S = 60.0


def queue_length_policy(pools: dict, cfg: AutoscalingConfig, state: dict, now: float,
                        ongoing: dict[str, float]) -> dict[str, int]:
    """Ray Serve's default per deployment (module doc); `ongoing`: in-flight over the look-back."""
    out = {}
    for name, p in pools.items():
        b = cfg.pool(name)
        desired = min(max(math.ceil(ongoing[name] / cfg.target_ongoing_requests), b.min_replicas),
                      b.max_replicas)
        st = state.setdefault(name, {})
        if desired == p.target:
            st.clear()
            out[name] = p.target
            continue
        direction = "up" if desired > p.target else "down"
        if st.get("direction") != direction:
            st.update(direction=direction, since=now)
        delay = cfg.upscale_delay_s if direction == "up" else cfg.downscale_delay_s
        out[name] = desired if now - st["since"] >= delay else p.target
        if out[name] == desired:
            st.clear()
    return out


def dynamo_planner(pools: dict, cfg: AutoscalingConfig, state: dict, now: float,
                   sent_tokens: dict[str, float], global_expected_tokens: float,
                   tp: int, itl_fraction: float = 1.0) -> dict[str, int]:
    """Dynamo-style targets (module doc). `sent_tokens`: output tokens routed to each pool so
    far (cumulative); `state` keeps the last interval's mark; the planner's ITL target is
    `itl_fraction` × the SLO (a tighter target provisions more)."""
    if now - state.get("t", -math.inf) < DYNAMO_INTERVAL_S:
        return {n: p.target for n, p in pools.items()}
    last = state.get("tokens", {n: 0.0 for n in pools})
    span = now - state.get("t", now - DYNAMO_INTERVAL_S)
    state.update(t=now, tokens=dict(sent_tokens))
    slo = itl_fraction * cfg.slo_tpot_ms / 1e3
    want = {}
    for n, p in pools.items():
        if "curve" not in state.setdefault("curves", {}).get(n, {}):
            state["curves"][n] = {"curve": PoolCurve(p.model.points(), p.max_num_seqs)}
        e = global_expected_tokens if n == "speculative" else 1.0
        cap = state["curves"][n]["curve"].capacity(slo, e)
        rate = (sent_tokens[n] - last[n]) / span
        b = cfg.pool(n)
        want[n] = min(max(math.ceil(rate / cap) if cap > 0 else b.max_replicas, b.min_replicas),
                      b.max_replicas)
    total = sum(want.values()) * tp
    if total > cfg.budget_accelerators:  # proportional scale-down to the budget
        f = cfg.budget_accelerators / total
        want = {n: max(cfg.pool(n).min_replicas, math.floor(w * f)) for n, w in want.items()}
    return want


def specserve_targets(pools: dict, cfg: AutoscalingConfig, state: dict, now: float,
                      ongoing: dict[str, float], arrivals: list, etau: dict[str, float],
                      gaining: tuple[str, ...], tp: int) -> tuple[dict[str, int], dict]:
    """The budget split's targets: views of both pools and the demand per task type observed
    in `arrivals` ((t, task, tokens × cohort) within the window), through `decide`."""
    per_task: dict[str, float] = {}
    for _, task, tokens in arrivals:
        per_task[task] = per_task.get(task, 0.0) + tokens / cfg.demand_window_s
    demand = [Load(r, etau[t], t in gaining) for t, r in sorted(per_task.items())]
    views = {n: PoolView(p.running, p.target, ongoing[n], float(p.queued()),
                         memory_bound_fraction(p.model, p.batch()) if p.running else None,
                         tensor_parallel_size=tp, step_times=tuple(p.model.points().items()),
                         max_num_seqs=p.max_num_seqs)
             for n, p in pools.items()}
    decisions, state = decide(views, cfg, state, now, demand=demand)
    return {n: d.replicas for n, d in decisions.items()}, state
