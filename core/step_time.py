"""Step-time model of one pool: seconds per step as a function of the batch B.

For the vanilla pool a step is T_t(B, 1); for the speculative pool it is γ·T_d(B) + T_t(B, γ+1)
(draft γ tokens, verify γ+1). Both are measured on the real replicas, never assumed: a profile at
replica start (`deployments.profile`: B requests decoding together, Δwall / Δengine iterations),
then online samples while busy. The router's online samples are seconds per decode step as a
request lives it: the mean of vLLM's inter-token latencies (one per output of a running request)
at N requests in the engine (running + waiting), `core.stats.busy_window_samples`.
Δwall / Δiterations at the running batch mispredicted a request's token rate on our 2-core CPU
box by up to 5x at batch 64 (our reference benchmark: waiting requests, prefill steps and
the other pool on the same cores are invisible to it); the autoscaler's roofline
(deployments/utilization.py) keeps it.

Context length: a decode step also reads every running sequence's KV cache, so at a batch of B
sequences with a mean context of L tokens, T(B, L) = T(B, L_ref) + κ·B·(L − L_ref), κ in seconds per
sequence per context token (the attention's share, linear in the tokens it reads; MagicDec,
Chen et al. 2024, arXiv:2408.11049, §3: at long context and large batch the KV read, not the
weights, bounds a step, and speculation pays again because verification reads the KV once for
γ+1 tokens). κ and L_ref come from the startup profile (`deployments.profile.profile_context_cost`:
the same batch at a short and a long prompt); the buckets hold step times at L_ref, and a served
sample taken at another mean context is moved to L_ref before it is folded in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def bucket_of(batch: float) -> int:
    """Nearest power-of-two bucket exponent of a batch size (B ≤ 1 → 0)."""
    return max(0, round(math.log2(max(batch, 1.0))))


@dataclass
class StepTimeModel:
    """Per-bucket EWMA of step seconds, and what a request lives at any count in the engine.

    Args:
        weight: weight of a new online sample (0..1]; profile points enter with weight 1.
        max_batch: the engine's running-batch cap (vLLM `max_num_seqs`); None: unbounded. With
            N requests in the engine only min(N, max_batch) run; the rest wait.
    """

    weight: float = 0.2
    max_batch: int | None = None
    # κ: seconds per step per running sequence per context token; 0: context not modelled
    context_s: float = 0.0
    ref_context: float = 0.0  # mean context tokens per sequence at which the buckets hold
    _mean_s: dict[int, float] = field(default_factory=dict)
    _profiled: set[int] = field(default_factory=set)  # buckets still holding a profile point
    _fit: dict[int, float] | None = None  # `_mean_s` made non-decreasing (`_monotone`); cached

    def set_context_cost(self, context_s: float, ref_context: float) -> None:
        """Sets κ (seconds per step per running sequence per context token, ≥ 0) and the mean
        context L_ref (tokens per sequence) at which the buckets hold; non-finite or negative
        values leave context out of the model (κ = 0)."""
        ok = math.isfinite(context_s) and math.isfinite(ref_context) and context_s >= 0 \
            and ref_context >= 0
        self.context_s, self.ref_context = (context_s, ref_context) if ok else (0.0, 0.0)

    def _context_delta(self, batch: float, context: float | None) -> float:
        """κ·B·(L − L_ref) seconds at running batch `batch` and mean context `context`."""
        if context is None or not self.context_s:
            return 0.0
        return self.context_s * self._running(max(batch, 1.0)) * (max(context, 0.0)
                                                                 - self.ref_context)

    def observe(self, batch: float, step_s: float, context: float | None = None) -> None:
        """Folds one measured step time (seconds) at running batch `batch` into its bucket; the
        first sample of a bucket replaces its profile point rather than averaging with it (a startup
        profile runs on a cold engine: speculative batch 1 profiled 28 ms against ~20 ms served
        in our reference benchmark).

        Args:
            context: mean context tokens per sequence while it was measured (None: unknown,
                taken as L_ref); the sample is moved to L_ref (module docstring), never below half
                its measured value.
        """
        if step_s <= 0 or batch <= 0:
            return
        step_s = max(step_s - self._context_delta(batch, context), step_s / 2)
        b = bucket_of(self._running(batch))
        old = self._mean_s.get(b)
        if old is None or b in self._profiled:
            self._profiled.discard(b)
            self._mean_s[b] = step_s
        else:
            self._mean_s[b] = old + self.weight * (step_s - old)
        self._fit = None

    def load_profile(self, profile: dict[int, float]) -> None:
        """Seeds buckets from a startup profile {batch: step seconds} where no sample exists."""
        for batch, step_s in profile.items():
            b = bucket_of(batch)
            if b not in self._mean_s:
                self._mean_s[b] = step_s
                self._profiled.add(b)
                self._fit = None

    def fold(self, profile: dict[int, float], samples, seen: dict[str, int],
             context_cost: tuple[float, float] | None = None,
             context: float | None = None) -> None:
        """Folds one pool's StatsBoard entry: its replicas' startup `profile` (`load_profile`),
        then each replica's newest served sample, once (`seen`: replica id -> the sample id
        last folded, kept by the caller across calls).

        Args:
            samples: [(replica id, sample id, batch, seconds per step)] (`PoolStats.step_samples`).
            context_cost: (κ, L_ref) of the replicas' profile (`set_context_cost`); None or
                L_ref 0 (not measured): keep.
            context: mean context tokens per sequence in flight to the pool now, the samples'
                context (None: unknown).
        """
        if context_cost is not None and context_cost[1] > 0:
            self.set_context_cost(*context_cost)
        self.load_profile(profile)
        for replica, sample_id, batch, step_s in samples:
            if seen.get(replica) != sample_id:
                seen[replica] = sample_id
                self.observe(batch, step_s, context)

    def _running(self, batch: float) -> float:
        return min(batch, self.max_batch) if self.max_batch else batch

    def step_time(self, batch: float, context: float | None = None) -> float | None:
        """Seconds per decode step as a request lives it with `batch` requests in the engine at a
        mean context of `context` tokens per sequence (None: L_ref, the profile's); None before
        any profile or sample.

        Up to `max_batch`: the step time of that running batch, interpolated in log2(B) between
        known buckets (their means made non-decreasing in B, `_monotone`), flat below the
        smallest, and beyond the largest extended along the line
        through the last two (a larger batch never steps faster; with one bucket, step time
        proportional to the batch: the compute-bound bound). Above `max_batch`, N requests share
        max_batch slots, so each advances one token every T(max_batch) · N / max_batch seconds
        (processor sharing; waiting requests' prefills not counted). Context adds κ·B·(L − L_ref)
        to the running step (module docstring), never taking it below half its L_ref value.
        """
        if not self._mean_s:
            return None
        running = max(self._running(batch), 1.0)
        queueing = max(1.0, batch / running)
        base = self._running_step(running)
        return max(base + self._context_delta(running, context), base / 2) * queueing

    def served(self, batch: float) -> bool:
        """Whether the bucket of `batch` (at the running batch) holds a served sample, not only
        the startup profile point or nothing."""
        b = bucket_of(self._running(max(batch, 1.0)))
        return b in self._mean_s and b not in self._profiled

    def _fitted(self) -> dict[int, float]:
        if self._fit is None:
            self._fit = _monotone(self._mean_s)
        return self._fit

    def _running_step(self, batch: float) -> float:
        x = math.log2(batch)
        mean_s = self._fitted()
        keys = sorted(mean_s)
        if x <= keys[0]:
            return mean_s[keys[0]]
        if x >= keys[-1]:
            top_b, top_s = 2.0 ** keys[-1], mean_s[keys[-1]]
            if len(keys) == 1:
                return top_s * batch / top_b
            prev_b, prev_s = 2.0 ** keys[-2], mean_s[keys[-2]]
            slope = max(0.0, (top_s - prev_s) / (top_b - prev_b))
            return top_s + slope * (batch - top_b)
        hi = next(k for k in keys if k >= x)
        lo = max(k for k in keys if k <= x)
        if hi == lo:
            return mean_s[lo]
        f = (x - lo) / (hi - lo)
        return mean_s[lo] * (1 - f) + mean_s[hi] * f

    def points(self) -> dict[int, float]:
        """{batch: step seconds} per known bucket, as `step_time` uses them (made non-decreasing
        in the batch, `_monotone`; for metrics, reports and the throughput pricing)."""
        return {2 ** b: s for b, s in sorted(self._fitted().items())}


def _monotone(mean_s: dict[int, float]) -> dict[int, float]:
    """The least-squares non-decreasing fit of per-bucket step times (isotonic regression by pool
    adjacent violators, equal weights): a step with more sequences in it never takes less time
    (it does the same work plus more), so a bucket measured slower than a larger one is noise of
    the moment it was sampled, averaged with its neighbours rather than believed. Seen on our
    2-core box (2026-12-04, routed 1+1 after warm-up): the speculative pool's step 22.1 ms at
    batch 2 beside 12.5 ms at 4, the vanilla pool's 9.9 beside 7.4; S(B) rose and fell with it.

    Args:
        mean_s: {bucket exponent: seconds per step}.

    Returns:
        The same keys with non-decreasing values (unchanged where already monotone).
    """
    blocks: list[list] = []  # [sum, count, keys]
    for b in sorted(mean_s):
        blocks.append([mean_s[b], 1, [b]])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count, keys = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
            blocks[-1][2] += keys
    return {b: total / count for total, count, keys in blocks for b in keys}


@dataclass
class HostSharing:
    """How much the pools slow each other down: ρ per pool, its step time while the other pool
    has requests running over its step time while the other pool is idle, at the same batch.

    On a GPU cluster the pools own separate accelerators and ρ ≈ 1. On one host they share what
    is not partitioned: on our 2-core box each engine owns a core, yet the frontend (Serve's
    proxy, the router, the pool replicas, Ray) runs wherever a core is free, so two busy tiny
    engines made 0.79x what one made (bench/results/2026-12-06-tiny-routed-seeded, machine cell:
    16 streams on one pool 1311 tok/s, 8 + 8 on both 1032). ρ is learned from served samples
    only (`core.stats.busy_window_samples`' request step, the same samples `StepTimeModel`
    folds), filed in two step-time models per pool by whether the other pool was busy when the
    sample came in; a startup profile runs without the frontend and enters neither.

    Args:
        weight: weight of a new sample in its bucket's EWMA (as `StepTimeModel.weight`).
    """

    weight: float = 0.2
    _alone: dict[str, StepTimeModel] = field(default_factory=dict)
    _shared: dict[str, StepTimeModel] = field(default_factory=dict)

    def observe(self, pool: str, batch: float, step_s: float, other_busy: bool,
                context: float | None = None) -> None:
        """Files one served sample of `pool` (seconds per step at `batch` requests in the
        engine, mean `context` tokens) as taken while the other pool was busy or idle."""
        models = self._shared if other_busy else self._alone
        models.setdefault(pool, StepTimeModel(weight=self.weight)).observe(batch, step_s,
                                                                            context)

    def slowdown(self, pool: str, batch: float | None = None) -> float | None:
        """ρ of `pool` at `batch` requests in its engine: shared / alone step time of that batch's
        bucket when it was sampled both ways, else (or with no batch) the geometric mean over
        the buckets that were (the frontend's share of a step, hence ρ, shrinks as the batch
        grows); None: no bucket sampled both ways yet."""
        alone, shared = self._alone.get(pool), self._shared.get(pool)
        if alone is None or shared is None:
            return None
        ratios = {b: shared._mean_s[b] / alone._mean_s[b]
                  for b in alone._mean_s.keys() & shared._mean_s.keys()}
        if not ratios:
            return None
        if batch is not None and (b := bucket_of(batch)) in ratios:
            return ratios[b]
        return math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))

    def slowdowns(self) -> dict[str, float]:
        """ρ of every pool known both ways."""
        return {pool: rho for pool in self._alone if (rho := self.slowdown(pool)) is not None}
