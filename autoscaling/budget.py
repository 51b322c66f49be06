"""Both pools sized as one split of the accelerator budget: `decide_budget(views, demand, cfg,
state, now)`, what `autoscaling.rules.decide` runs once arrival rates and step times are
known.

Each tick, in order:

| condition | targets | reason |
| --- | --- | --- |
| a pool at 0 has requests waiting at its handle | it gets 1 at once (the other −1 if the budget is full) | `demand` |
| Serve is still moving to the last targets | hold | `scaling_in_progress` |
| the last move started new replicas first and they serve | the move's final split, at once | `handover` |
| otherwise | `split.choose_split` (its table); a `shortfall` move waits `upscale_delay_s` (none when the current split misses the SLO at the observed load already: `urgent`), a `save` or `rebalance` (not urgent) `downscale_delay_s`, wanted without interruption (until then `pending`) | its reason |

Replica start times are measured per pool: from a target raised by this policy to the pool
running that many replicas (an EWMA in the state, `replica_start_s` until measured), and enter
the move's start cost. Every decision carries the predicted gain (`SplitChoice.gain`).
State: one JSON dict per pool (Serve keeps each deployment's policy state apart).
"""

from __future__ import annotations

from autoscaling.decision import PoolView, ScalingDecision
from autoscaling.goodput import Load, PoolCurve
from autoscaling.split import POOLS, choose_split
from core import AutoscalingConfig
from core.specdecode import MIN_SPEEDUP

START_WEIGHT = 0.5  # weight of a new start-time measurement in a pool's EWMA


def _track_starts(views: dict[str, PoolView], state: dict, now: float) -> dict[str, dict]:
    """Per pool its carried state with the start timer settled and start time measured."""
    out = {}
    for p, v in views.items():
        st = {k: x for k, x in state.get(p, {}).items() if k in ("start_s", "starting", "plan",
                                                                 "after")}
        timer = st.get("starting")
        if timer and v.target < timer["to"]:
            del st["starting"]  # no longer wanted: nothing to time
        elif timer and v.replicas >= timer["to"]:
            sample, old = now - timer["since"], st.get("start_s")
            st["start_s"] = sample if old is None else old + START_WEIGHT * (sample - old)
            del st["starting"]
        out[p] = st
    return out


def _wake(views: dict[str, PoolView], cfg: AutoscalingConfig) -> dict[str, int] | None:
    """Targets that start a replica of each pool at 0 with requests waiting; None: none waits."""
    targets = {p: v.target for p, v in views.items()}
    woken = [p for p, v in views.items() if v.replicas == 0 and v.target == 0 and v.ongoing > 0]
    if not woken:
        return None
    for p in woken:
        targets[p] = max(1, cfg.pool(p).min_replicas)
        for q in targets:
            while (q != p and targets[q] > cfg.pool(q).min_replicas and
                   sum(targets[r] * views[r].tensor_parallel_size for r in targets)
                   > cfg.budget_accelerators):
                targets[q] -= 1
    return targets


def decide_budget(views: dict[str, PoolView], demand: list[Load], cfg: AutoscalingConfig,
                  state: dict, now: float, min_speedup: float = MIN_SPEEDUP,
                  ) -> tuple[dict[str, ScalingDecision], dict]:
    """Replica targets of both pools (module table), and the next state.

    Args:
        views: "vanilla" and "speculative", each with its step times.
        demand: the observed offered load per request class.
        cfg: the autoscaling section of the config.
        state: what the previous call returned ({} at first).
        now: seconds on any monotonic clock.
        min_speedup: the router's threshold on S.
    """
    st = _track_starts(views, state, now)
    targets = {p: v.target for p, v in views.items()}

    def out(wanted: dict[str, int], reason: str, gain=None, pending: bool = False):
        run = targets if pending else wanted
        for p in views:
            st[p]["reason"] = reason
            if not pending:
                st[p].pop("plan", None)
                if run[p] > targets[p]:
                    st[p]["starting"] = {"since": now, "to": run[p]}
        return ({p: ScalingDecision(run[p], wanted[p], reason, targets[p], pending, gain)
                 for p in views}, st)

    woken = _wake(views, cfg)
    if woken is not None:
        for p in views:
            st[p].pop("after", None)
        return out(woken, "demand")
    if any(v.target != v.replicas for v in views.values()):
        return out(targets, "scaling_in_progress")
    after = st["vanilla"].pop("after", None)
    st["speculative"].pop("after", None)
    if after is not None:
        return out(dict(zip(POOLS, after)), "handover")
    curves = {p: PoolCurve(dict(v.step_times), v.max_num_seqs) for p, v in views.items()}
    tp = {p: v.tensor_parallel_size for p, v in views.items()}
    start_s = {p: st[p]["start_s"] for p in views if "start_s" in st[p]}
    current = (targets["vanilla"], targets["speculative"])
    choice = choose_split(current, demand, curves, tp, cfg, start_s, min_speedup)
    if choice.split == current:
        return out(targets, choice.reason, choice.gain)
    final = dict(zip(POOLS, choice.split))
    kind = "up" if choice.reason == "shortfall" else "down"  # save, rebalance: not urgent
    plan = st["vanilla"].get("plan", {})
    since = plan["since"] if plan.get("kind") == kind else now
    delay = 0.0 if choice.urgent else cfg.upscale_delay_s if kind == "up" else \
        cfg.downscale_delay_s
    if now - since < delay:
        for p in views:
            st[p]["plan"] = {"kind": kind, "since": since}
        return out(final, choice.reason, choice.gain, pending=True)
    if choice.make_before_break and any(final[p] < targets[p] for p in views):
        union = {p: max(final[p], targets[p]) for p in views}
        decisions, new = out(union, choice.reason, choice.gain)
        for p in views:
            new[p]["after"] = list(choice.split)
        return decisions, new
    return out(final, choice.reason, choice.gain)
