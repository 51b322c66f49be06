"""The budget's split between the two pools, chosen by predicted goodput: `choose_split(...)`.

Every split (n_v, n_s) within the pools' bounds with n_v·tp_v + n_s·tp_s ≤ budget_accelerators
is forecast (autoscaling/goodput.py) at the planned load, the observed load × (1 + headroom).
With C the current split, F(·) a forecast and "serves" = the whole planned load within the TPOT
SLO (a predicted mean TPOT ≤ slo_tpot_ms / tpot_spread: requests spread above the mean):

| condition | wants | reason |
| --- | --- | --- |
| no load at all | the pools' minimums | `drained` |
| C serves; a split of fewer accelerators serves load × (1 + downscale_headroom), and so does what runs while it starts | of those the fewest accelerators, then the lowest TPOT | `save` |
| C serves; a split of no more accelerators has a mean TPOT ≥ min_gain lower, and what runs while it starts serves | that split | `rebalance` |
| C does not serve; a split serves (or serves ≥ min_gain more, and more than nothing) | the fewest accelerators that serve, then the lowest TPOT, growing C's pools only when such a split serves (none serves: the most goodput) | `shortfall` |
| the same, but what it loses while its replicas start exceeds what it gains over load_horizon_s (both in goodput at the observed load) | hold | `start_cost` |
| otherwise | hold | `steady` |

What runs while a move's replicas start: when the current split plus the new replicas fit in
the budget, the current split (new replicas start first, old ones stop once they serve:
`make_before_break`); otherwise min(C, new) per pool (old replicas stop first). A move's start
takes the measured start time of its slowest growing pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from autoscaling.goodput import Forecast, Load, PoolCurve, forecast_all
from core import AutoscalingConfig
from core.specdecode import MIN_SPEEDUP

POOLS = ("vanilla", "speculative")


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """The policy's choice of split and the forecasts behind it.

    Attributes:
        split: (vanilla, speculative) replicas wanted.
        reason: why (module table).
        current: forecast of the current split at the planned load.
        chosen: forecast of the wanted split at the planned load.
        make_before_break: the move's new replicas start before old ones stop.
        urgent: a shortfall where the current split does not serve even the observed load.
    """

    split: tuple[int, int]
    reason: str
    current: Forecast
    chosen: Forecast
    make_before_break: bool = False
    urgent: bool = False

    @property
    def gain(self) -> dict:
        """Predicted effect of the move: goodput within the SLO (tok/s), mean TPOT (ms) and
        accelerators, [current, wanted]; demand in tok/s."""
        c, w = self.current, self.chosen
        return {"goodput_tok_s": [round(c.goodput_tok_s, 1), round(w.goodput_tok_s, 1)],
                "demand_tok_s": round(c.demand_tok_s, 1),
                "tpot_ms": [round(1e3 * c.tpot_s, 2), round(1e3 * w.tpot_s, 2)],
                "accelerators": [c.accelerators, w.accelerators]}


def scaled(loads: list[Load], factor: float) -> list[Load]:
    """`loads` with every class's tokens/s × factor."""
    return [Load(x.tokens_per_s * factor, x.expected_tokens, x.gains) for x in loads]


def candidate_splits(cfg: AutoscalingConfig, tp: Mapping[str, int]) -> list[tuple[int, int]]:
    """Every (n_v, n_s) within the pools' bounds that fits budget_accelerators."""
    v, s = cfg.pool("vanilla"), cfg.pool("speculative")
    return [(a, b) for a in range(v.min_replicas, v.max_replicas + 1)
            for b in range(s.min_replicas, s.max_replicas + 1)
            if a * tp.get("vanilla", 1) + b * tp.get("speculative", 1) <= cfg.budget_accelerators]


def choose_split(current: tuple[int, int], loads: list[Load], curves: Mapping[str, PoolCurve],
                 tp: Mapping[str, int], cfg: AutoscalingConfig, start_s: Mapping[str, float],
                 min_speedup: float = MIN_SPEEDUP) -> SplitChoice:
    """The split to run for the observed `loads` (module table).

    Args:
        current: (vanilla, speculative) replicas the pools are set to now.
        loads: the observed offered load per request class.
        curves: per pool its replica curve (the router's step-time model).
        tp: accelerators per replica of each pool.
        cfg: the autoscaling section (budget, bounds, SLO, hysteresis).
        start_s: per pool the seconds a replica takes from its target to serving.
        min_speedup: the router's threshold on S.
    """
    slo = cfg.slo_tpot_ms / 1e3 / cfg.tpot_spread  # the mean that keeps the spread within it
    splits = candidate_splits(cfg, tp)

    def fc(cands, factor: float) -> dict[tuple[int, int], Forecast]:
        return forecast_all(list(cands), scaled(loads, factor), curves, slo, tp, min_speedup)

    planned_f = 1 + cfg.headroom
    fcs = fc({*splits, current}, planned_f)
    cur = fcs[current]
    if cur.demand_tok_s <= 0:
        floor = (cfg.vanilla.min_replicas, cfg.speculative.min_replicas)
        floor_fc = fc([floor], planned_f)[floor]
        return SplitChoice(floor, "drained" if floor != current else "steady", cur, floor_fc)

    def at(split: tuple[int, int]) -> Forecast:
        return fcs[split] if split in fcs else fc([split], planned_f)[split]

    def kept(split: tuple[int, int]) -> tuple[tuple[int, int], bool]:
        union = tuple(max(a, b) for a, b in zip(current, split))
        if sum(n * tp.get(p, 1) for p, n in zip(POOLS, union)) <= cfg.budget_accelerators:
            return current, True
        return tuple(min(a, b) for a, b in zip(current, split)), False

    def during_ok(split: tuple[int, int]) -> bool:
        k, _ = kept(split)
        return k == current or at(k).sufficient

    if cur.sufficient:
        cheaper = [s for s in splits if fcs[s].accelerators < cur.accelerators and fcs[s].sufficient]
        down = fc(cheaper, 1 + cfg.downscale_headroom)
        cheaper = [fcs[s] for s in cheaper if down[s].sufficient and during_ok(s)]
        if cheaper:
            best = min(cheaper, key=lambda f: (f.accelerators, f.tpot_s))
            return SplitChoice(best.split, "save", cur, best, kept(best.split)[1])
        better = [f for f in fcs.values() if f.sufficient and f.accelerators <= cur.accelerators
                  and f.tpot_s <= (1 - cfg.min_gain) * cur.tpot_s and during_ok(f.split)]
        if better:
            best = min(better, key=lambda f: (f.tpot_s, f.accelerators))
            return SplitChoice(best.split, "rebalance", cur, best, kept(best.split)[1])
        return SplitChoice(current, "steady", cur, cur)
    cands = [fcs[s] for s in splits]
    growing = [f for f in cands if f.sufficient and all(b >= a for a, b in zip(current, f.split))]
    serving = growing or [f for f in cands if f.sufficient]
    best = (min(serving, key=lambda f: (f.accelerators, f.tpot_s)) if serving else
            min(cands, key=lambda f: (-round(f.goodput_tok_s, 6), f.tpot_s, f.accelerators)))
    if best.split == current or not (
            best.sufficient or (best.goodput_tok_s > cur.goodput_tok_s
                                and best.goodput_tok_s >= (1 + cfg.min_gain) * cur.goodput_tok_s)):
        return SplitChoice(current, "steady", cur, cur)  # none serves, and it serves < min_gain more
    k, mbb = kept(best.split)
    growing = [p for p, a, b in zip(POOLS, current, best.split) if b > a]
    start = max((start_s.get(p, cfg.replica_start_s) for p in growing), default=0.0)
    # both priced at the load there is now (the planned one sizes splits, it is not served):
    # the goodput lost while the move's replicas start, against what it gains over the horizon
    # (priced at the planned load, a start mid-burst looked free and its gain 3x too big: the
    # simulator's split flipped 7 + 5 -> 1 + 15 -> 9 + 4 in one burst)
    observed = fc({current, k, best.split}, 1.0)
    loss = 0.0 if mbb else max(0.0, observed[current].goodput_tok_s
                               - observed[k].goodput_tok_s) * start
    gain = (observed[best.split].goodput_tok_s - observed[current].goodput_tok_s) * max(
        0.0, cfg.load_horizon_s - start)
    if loss >= gain and loss > 0:
        return SplitChoice(current, "start_cost", cur, best)
    urgent = not observed[current].sufficient
    return SplitChoice(best.split, "shortfall", cur, best, mbb, urgent)
