"""Step-time model of one pool: seconds per step as a function of the batch B.

For the vanilla pool a step is T_t(B, 1); for the speculative pool it is γ·T_d(B) + T_t(B, γ+1)
(draft γ tokens, verify γ+1). Both are measured on the real replicas, never assumed: a profile at
replica start (`deployments.profile`: B requests decoding together, Δwall / Δengine iterations),
then online samples while busy. The router's online samples are seconds per decode step as a
request lives it: the mean of vLLM's inter-token latencies (one per output of a running request)
at N requests in the engine (running + waiting), `deployments.stats.busy_window_samples`.
Δwall / Δiterations at the running batch mispredicted a request's token rate on our 2-core CPU
box by up to 5x at batch 64 (session-2 reference benchmark: waiting requests, prefill steps and
the other pool on the same cores are invisible to it); the autoscaler's roofline
(deployments/utilization.py) keeps it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def bucket_of(batch: float) -> int:
    """Nearest power-of-two bucket exponent of a batch size (B ≤ 1 → 0)."""
    return max(0, round(math.log2(max(batch, 1.0))))


@dataclass
class StepTimeModel:
    """Per-bucket EWMA of step seconds.

    Args:
        weight: weight of a new online sample (0..1]; profile points enter with weight 1.
    """

    weight: float = 0.2
    _mean_s: dict[int, float] = field(default_factory=dict)
    _profiled: set[int] = field(default_factory=set)  # buckets still holding a profile point

    def observe(self, batch: float, step_s: float) -> None:
        """Folds one measured step time (seconds) at running batch `batch` into its bucket; the
        first sample of a bucket replaces its profile point rather than averaging with it (both
        pools profile at once when they start on shared cores, so profile points can be ~1.5x
        high: session-3 benchmark, speculative batch 1 profiled 28 ms against ~20 ms served)."""
        if step_s <= 0 or batch <= 0:
            return
        b = bucket_of(batch)
        old = self._mean_s.get(b)
        if old is None or b in self._profiled:
            self._profiled.discard(b)
            self._mean_s[b] = step_s
        else:
            self._mean_s[b] = old + self.weight * (step_s - old)

    def load_profile(self, profile: dict[int, float]) -> None:
        """Seeds buckets from a startup profile {batch: step seconds} where no sample exists."""
        for batch, step_s in profile.items():
            b = bucket_of(batch)
            if b not in self._mean_s:
                self._mean_s[b] = step_s
                self._profiled.add(b)

    def step_time(self, batch: float) -> float | None:
        """Seconds per step at `batch`; None before any profile or sample."""
        if not self._mean_s:
            return None
        x = math.log2(max(batch, 1.0))
        keys = sorted(self._mean_s)
        if x <= keys[0]:
            return self._mean_s[keys[0]]
        if x >= keys[-1]:
            return self._mean_s[keys[-1]]
        hi = next(k for k in keys if k >= x)
        lo = max(k for k in keys if k <= x)
        if hi == lo:
            return self._mean_s[lo]
        f = (x - lo) / (hi - lo)
        return self._mean_s[lo] * (1 - f) + self._mean_s[hi] * f

    def points(self) -> dict[int, float]:
        """{batch: step seconds} per known bucket (for metrics and reports)."""
        return {2 ** b: s for b, s in sorted(self._mean_s.items())}
