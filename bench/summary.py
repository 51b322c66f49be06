"""Figures of one benchmark cell (a configuration at a concurrency or an arrival rate).

Goodput follows DistServe (Zhong et al. 2024): requests per second that met the SLO, here
TTFT ≤ `ttft_slo_s` and TPOT ≤ `tpot_slo_s`. Acceptance per task type from the requests'
acceptance histograms (`histogram[j]`: verification steps that accepted j draft tokens):
α_i = steps accepting ≥ i / steps accepting ≥ i − 1, mean acceptance length = 1 + accepted / steps
(../shared/DESIGN.md §2).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bench.client import Sample


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objective per request, in seconds."""

    ttft_s: float
    tpot_s: float

    def met(self, s: Sample) -> bool:
        return s.ok and s.ttft_s <= self.ttft_s and (s.tpot_s is None or s.tpot_s <= self.tpot_s)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation, as numpy's default; None if empty."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def acceptance(histograms: list[list[int]]) -> dict | None:
    """Per-position α and mean acceptance length over summed histograms (None: no drafts)."""
    hists = [h for h in histograms if h]
    if not hists:
        return None
    k = max(len(h) for h in hists) - 1
    total = [sum(h[j] if j < len(h) else 0 for h in hists) for j in range(k + 1)]
    steps = sum(total)
    if steps == 0:
        return None
    reached = [sum(total[i:]) for i in range(k + 1)]  # reached[i]: steps accepting ≥ i
    alphas = [reached[i] / reached[i - 1] if reached[i - 1] else 0.0 for i in range(1, k + 1)]
    accepted = sum(j * n for j, n in enumerate(total))
    return {"alpha": alphas, "mean_acceptance_length": 1 + accepted / steps, "steps": steps}


def summarize(samples: list[Sample], wall_s: float, slo: Slo) -> dict:
    """The cell's figures: throughput, latency percentiles, goodput, errors, route mix, acceptance.

    Times in the result are milliseconds (`_ms`) or seconds (`_s`) as named.
    """
    ok = [s for s in samples if s.ok]
    tokens = sum(s.completion_tokens for s in ok)
    ttft = [s.ttft_s for s in ok]
    tpot = [s.tpot_s for s in ok if s.tpot_s is not None]
    itl = [x for s in ok for x in s.itl_s]
    by_task: dict[str, list[list[int]]] = {}
    for s in ok:
        by_task.setdefault(s.task, []).append(s.acceptance_histogram)

    def ms(values, q):
        p = percentile(values, q)
        return None if p is None else round(1000 * p, 2)

    return {
        "requests": len(samples), "errors": len(samples) - len(ok), "wall_s": round(wall_s, 2),
        "output_tok_s": round(tokens / wall_s, 1) if wall_s > 0 else 0.0,
        "goodput_req_s": round(sum(slo.met(s) for s in samples) / wall_s, 3) if wall_s else 0.0,
        "slo_attainment": round(sum(slo.met(s) for s in samples) / max(len(samples), 1), 3),
        "ttft_p50_ms": ms(ttft, 50), "ttft_p99_ms": ms(ttft, 99),
        "tpot_p50_ms": ms(tpot, 50), "tpot_p99_ms": ms(tpot, 99),
        "itl_p50_ms": ms(itl, 50), "itl_p99_ms": ms(itl, 99),
        "tpot_p50_ms_by_task": {task: ms([s.tpot_s for s in ok if s.task == task
                                          and s.tpot_s is not None], 50) for task in by_task},
        "route_mix": dict(Counter(s.route for s in ok)),
        "acceptance": {task: a for task, h in sorted(by_task.items())
                       if (a := acceptance(h)) is not None},
        "first_error": next((s.error for s in samples if not s.ok), ""),
    }
