"""Predicted goodput of splits of the budget: `forecast_all(splits, loads, curves, slo_tpot_s, ...)`.

The budget policy (autoscaling/split.py) compares splits (n_vanilla, n_speculative) with this
fluid model, built from what the router uses: each pool's step-time model (core/step_time.py
`StepTimeModel`: seconds per decode step as a request lives it with N requests in one replica's
engine, queueing beyond max_num_seqs included) and E[τ] per request class (core/acceptance.py).

One replica serving d output tokens/s, each sequence-step yielding e tokens (1 on the vanilla
pool; on the speculative pool the token-weighted harmonic mean of its classes' E[τ], total
tokens / total steps), holds N requests with d = N · e / T(N) (Little's law on steps); its TPOT
is T(N) / e. Its capacity within the SLO is e · N* / T(N*) at the largest N* with
T(N*) / e ≤ slo_tpot_s; above e · max_num_seqs / T(max_num_seqs) it is overloaded.

Routing as the router does it (router/policy.py): with both pools up, a class that may gain
(`Load.gains`) goes speculative while S = E[τ] · T_v / T_s ≥ min_speedup at the batches the
split runs, highest E[τ] first; the model takes the largest share f of those tokens (on a grid
of `SHARES` steps) at which the last class sent still has S ≥ min_speedup (the router's fixed
point). A pool at 0 replicas gets nothing; with only the speculative pool up, everything goes
there (the router's `pool_unavailable` fallback).

Goodput = output tokens/s served within the SLO: per pool min(demand, capacity), the capacity
being the tokens/s its replicas carry while its slowest class (lowest E[τ]) meets the SLO,
T(N) / E[τ]_min ≤ slo_tpot_s (`PoolCurve.capacity`). Past capacity a live pool misses for every
request of the class (replicas share its load evenly), so this counts what the split could serve
within the SLO, not what a saturated pool does: it ranks splits none of which serves the whole
load by how much of it each could (an all-or-nothing count would rank them all 0, and give the
policy no reason to prefer one).
`sufficient` means the whole demand is served within the SLO.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Mapping

from core import StepTimeModel
from core.specdecode import MIN_SPEEDUP, batched_speedup

SHARES = 20  # grid steps of the speculative share f in [0, 1]
UNSERVED_TPOT_S = 1000.0  # TPOT counted for tokens a pool cannot serve at all
_GRID_POINTS = 48


@dataclass(frozen=True, slots=True)
class Load:
    """One request class's offered load.

    Attributes:
        tokens_per_s: output tokens per second offered (arrivals/s × tokens per request).
        expected_tokens: E[τ] of the class on the speculative path (tokens per verification).
        gains: the router may send it speculative while both pools run (its task gains and it
            is not vanilla-only); False: vanilla unless the vanilla pool is at 0.
    """

    tokens_per_s: float
    expected_tokens: float
    gains: bool = True


class PoolCurve:
    """One replica's step time T(N) on a grid of N in [1, max_num_seqs], made non-decreasing,
    with x(N) = N / T(N) (tokens/s at e = 1), for fast inversion.

    Args:
        points: {batch: seconds per step as a request lives it} (`StepTimeModel.points()`).
        max_batch: the engine's max_num_seqs; None: 4 × the largest point.

    Raises:
        ValueError: `points` is empty.
    """

    def __init__(self, points: Mapping[int, float], max_batch: int | None):
        if not points:
            raise ValueError("points: no step time known")
        top = max_batch or 4 * max(points)
        model = StepTimeModel(max_batch=top)
        model.load_profile(dict(points))
        grid = sorted({1.0, float(top), *(top ** (i / (_GRID_POINTS - 1))
                                          for i in range(_GRID_POINTS))})
        self.n, self.t, self.x = [], [], []
        for n in grid:
            t = max(model.step_time(n), self.t[-1] if self.t else 0.0)
            self.n.append(n)
            self.t.append(t)
            self.x.append(max(n / t, self.x[-1] if self.x else 0.0))

    def step_s(self, tokens_per_s: float, e: float = 1.0) -> float:
        """Step seconds of a replica serving `tokens_per_s` at e tokens per sequence-step; inf
        when overloaded."""
        x = tokens_per_s / e
        if x <= self.x[0]:
            return self.t[0]
        if x >= self.x[-1]:
            return math.inf
        i = bisect.bisect_left(self.x, x)
        f = (x - self.x[i - 1]) / (self.x[i] - self.x[i - 1])
        return self.t[i - 1] + f * (self.t[i] - self.t[i - 1])

    def capacity(self, slo_tpot_s: float, e: float = 1.0) -> float:
        """Output tokens/s one replica serves with TPOT ≤ `slo_tpot_s` (0: not even alone)."""
        target = slo_tpot_s * e
        if self.t[0] > target:
            return 0.0
        i = bisect.bisect_right(self.t, target)  # t[:i] ≤ target
        if i == len(self.t):
            return e * self.x[-1]
        f = (target - self.t[i - 1]) / (self.t[i] - self.t[i - 1])
        return e * (self.x[i - 1] + f * (self.x[i] - self.x[i - 1]))


@dataclass(frozen=True, slots=True)
class Forecast:
    """What a split is predicted to do with the offered load.

    Attributes:
        split: (vanilla replicas, speculative replicas).
        accelerators: Σ replicas × tensor_parallel_size.
        demand_tok_s: offered output tokens/s.
        goodput_tok_s: output tokens/s served within the SLO (module doc).
        tpot_s: token-weighted mean TPOT, seconds (`UNSERVED_TPOT_S` for unservable tokens).
        speculative_share: f, the share of gaining tokens the router sends speculative.
    """

    split: tuple[int, int]
    accelerators: int
    demand_tok_s: float
    goodput_tok_s: float
    tpot_s: float
    speculative_share: float

    @property
    def sufficient(self) -> bool:
        """It serves the whole demand within the SLO."""
        return self.goodput_tok_s >= self.demand_tok_s * (1 - 1e-6)


def _spec_part(loads: list[Load], share: float) -> tuple[float, float, float]:
    """(tokens/s, E[τ] harmonic mean, E[τ] of the last class taken) of the gaining tokens'
    highest-E[τ] share `share`."""
    gaining = sorted((x for x in loads if x.gains and x.tokens_per_s > 0),
                     key=lambda x: -x.expected_tokens)
    left = share * sum(x.tokens_per_s for x in gaining)
    tokens, steps, last = 0.0, 0.0, math.inf
    for x in gaining:
        if left <= 0:
            break
        take = min(x.tokens_per_s, left)
        tokens, steps, left, last = tokens + take, steps + take / x.expected_tokens, left - take, \
            x.expected_tokens
    return tokens, (tokens / steps if steps > 0 else 1.0), last


def forecast_all(splits: list[tuple[int, int]], loads: list[Load],
                 curves: Mapping[str, PoolCurve], slo_tpot_s: float,
                 tensor_parallel_size: Mapping[str, int], min_speedup: float = MIN_SPEEDUP,
                 ) -> dict[tuple[int, int], Forecast]:
    """Forecast of every split in `splits` under `loads` (module doc).

    Args:
        splits: (vanilla replicas, speculative replicas) each.
        loads: the offered load per request class.
        curves: "vanilla" and "speculative" → that pool's replica curve.
        slo_tpot_s: the TPOT objective, seconds.
        tensor_parallel_size: accelerators per replica of each pool (absent: 1).
        min_speedup: the router's threshold on S (router.min_speedup).
    """
    van_c, spec_c = curves["vanilla"], curves["speculative"]
    demand = sum(x.tokens_per_s for x in loads)
    tp_v, tp_s = tensor_parallel_size.get("vanilla", 1), tensor_parallel_size.get("speculative", 1)
    all_steps = sum(x.tokens_per_s / x.expected_tokens for x in loads)
    e_all = demand / all_steps if all_steps > 0 else 1.0
    e_slowest = min((x.expected_tokens for x in loads if x.tokens_per_s > 0), default=1.0)
    parts = [_spec_part(loads, i / SHARES) for i in range(SHARES + 1)]
    # per share i: vanilla takes demand − tokens at e = 1, speculative tokens at e_i, whose
    # slowest class (the last taken, lowest E[τ]) must meet the SLO
    van = [(van_c, demand - tok, 1.0, 1.0) for tok, _, _ in parts]
    spec = [(spec_c, tok, e, last) for tok, e, last in parts]
    memo: dict = {}

    def pool(side: list, key: str, n: int, i: int) -> tuple[float, float, float]:
        """(goodput tok/s, TPOT s, step s) of n replicas sharing share i's tokens evenly."""
        hit = memo.get((key, n, i))
        if hit is None:
            curve, tokens, e, e_min = side[i]
            if tokens <= 0:
                hit = (0.0, 0.0, curve.t[0])
            elif n == 0:
                hit = (0.0, UNSERVED_TPOT_S, math.inf)
            else:
                step = curve.step_s(tokens / n, e)
                hit = (min(tokens, n * curve.capacity(slo_tpot_s * e_min / e, e)),
                       min(step / e, UNSERVED_TPOT_S), step)
            memo[(key, n, i)] = hit
        return hit

    out = {}
    for n_v, n_s in splits:
        acc = n_v * tp_v + n_s * tp_s
        if n_s == 0 or n_v == 0:  # one pool takes everything (none: nothing is served)
            if n_s == 0:
                good, tpot, _ = pool(van, "v", n_v, 0)
                f = 0.0
            else:
                step = spec_c.step_s(demand / n_s, e_all) if demand > 0 else spec_c.t[0]
                good = min(demand, n_s * spec_c.capacity(slo_tpot_s * e_slowest / e_all, e_all))
                tpot, f = min(step / e_all, UNSERVED_TPOT_S), 1.0
            out[(n_v, n_s)] = Forecast((n_v, n_s), acc, demand, good, tpot if demand else 0.0, f)
            continue
        best = None
        for i, (tokens, _, last) in enumerate(parts):
            good_v, tpot_v, step_v = pool(van, "v", n_v, i)
            good_s, tpot_s, step_s = pool(spec, "s", n_s, i)
            if i > 0 and step_s > 0 and batched_speedup(last, step_v, step_s) < min_speedup:
                break  # S of the last class sent fell below the router's threshold
            mean = ((demand - tokens) * tpot_v + tokens * tpot_s) / demand if demand else 0.0
            best = Forecast((n_v, n_s), acc, demand, good_v + good_s, mean, i / SHARES)
        out[(n_v, n_s)] = best
    return out
