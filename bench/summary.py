"""Figures over timed requests (`bench.client.Sample`): the SLO, percentiles, acceptance.

`bench.run`'s cells take their figures from vLLM's client (bench/serve_client.py); these serve the
benchmarks that time their own requests (bench.budget_trace, bench.sim_live). Goodput follows DistServe (Zhong et al. 2024): requests per second that met the SLO, here
TTFT ≤ `ttft_slo_s` and TPOT ≤ `tpot_slo_s`. Acceptance per task type from the requests'
acceptance histograms (`histogram[j]`: verification steps that accepted j draft tokens):
α_i = steps accepting ≥ i / steps accepting ≥ i − 1, mean acceptance length = 1 + accepted / steps
(../shared/DESIGN.md §2).
"""

from __future__ import annotations

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
