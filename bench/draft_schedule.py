"""Draft length per batch size: vLLM's `num_speculative_tokens_per_batch_size` table derived from
measured per-position acceptance and step times.

At batch B a speculative step drafts γ tokens per sequence and verifies γ + 1; it takes T_s(B, γ)
seconds (γ·T_d(B) + T_t(B, γ + 1); T_s(B, 0) = T_t(B, 1), a vanilla step) and emits E[τ(γ)]
tokens per sequence, with E[τ(γ)] = 1 + Σ_{i≤γ} Π_{j≤i} α_j (Leviathan et al. 2023, eq. 1 in
per-position form, `core.specdecode.expected_tokens`). Each sequence's token rate is
E[τ(γ)] / T_s(B, γ), and the batch's is B times that, so at every B

    γ*(B) = argmax_{0 ≤ γ ≤ K} E[τ(γ)] / T_s(B, γ)        (ties: the smaller γ)

with K the engine's `num_speculative_tokens`: vLLM clamps every table entry to K
(`vllm/v1/spec_decode/dynamic/utils.py`, `build_dynamic_sd_schedule_lookup`), and γ = 0 turns
speculation off at that batch size.

The α_j are the conditional per-position rates measured at K (`core.specdecode`, vLLM's
`num_accepted_tokens_per_pos`); a chain drafter's position j does not depend on how many
positions follow it, so E[τ(γ)] for γ < K is the truncated sum. T_s must be measured at each γ
the table may choose (the verify pass grows with γ + 1 once compute-bound): pass only the γ
values profiled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.specdecode import expected_tokens

Schedule = list[tuple[int, int, int]]  # vLLM's entries: (first batch, last batch, γ), inclusive


def best_draft_length(alphas: Sequence[float], step_s: Mapping[int, float]) -> int:
    """γ* = argmax_γ E[τ(γ)] / T_s(γ) at one batch size.

    Args:
        alphas: α_1..α_K, conditional per-position acceptance (K = num_speculative_tokens).
        step_s: {γ: seconds of one step at this batch}, γ in 0..K; at least one entry.

    Raises:
        ValueError: no step time, a γ outside 0..K, or a step time <= 0.
    """
    if not step_s:
        raise ValueError("step_s: needs at least one measured γ")
    for g, s in step_s.items():
        if not 0 <= g <= len(alphas) or s <= 0:
            raise ValueError(f"step_s: entry γ={g}, {s} s needs 0 <= γ <= {len(alphas)}, s > 0")
    return max(sorted(step_s), key=lambda g: expected_tokens(alphas[:g]) / step_s[g])


def draft_length_schedule(alphas: Sequence[float], step_s: Mapping[int, Mapping[int, float]]
                          ) -> Schedule:
    """vLLM's `num_speculative_tokens_per_batch_size` from profiled batch sizes.

    Args:
        alphas: α_1..α_K as measured on the speculative pool.
        step_s: {batch B: {γ: T_s(B, γ) seconds}}, for the profiled batch sizes (e.g. 1, 2, 4, ...).
            The first profiled batch's γ* also covers the batches below it (the table must start
            at 1); each profiled B covers B up to the next profiled one; the last, everything
            above (vLLM carries its last entry to max_num_seqs).

    Returns:
        [(first, last, γ), ...] with neighbouring batches of equal γ merged; the last entry ends at
        the largest profiled batch.

    Example:
        >>> draft_length_schedule([0.8, 0.8, 0.8], {1: {0: 1.0, 3: 1.2}, 64: {0: 1.0, 3: 3.0}})
        [(1, 63, 3), (64, 64, 0)]
    """
    if not step_s:
        raise ValueError("step_s: needs at least one profiled batch size")
    batches = sorted(step_s)
    if batches[0] < 1:
        raise ValueError(f"step_s: batch sizes must be >= 1, got {batches[0]}")
    out: Schedule = []
    for i, b in enumerate(batches):
        g = best_draft_length(alphas, step_s[b])
        first = 1 if i == 0 else b
        last = batches[i + 1] - 1 if i + 1 < len(batches) else b
        if out and out[-1][2] == g:
            out[-1] = (out[-1][0], last, g)
        else:
            out.append((first, last, g))
    return out


def smooth_step_times(step_s: Mapping[int, Mapping[int, float]]) -> dict[int, dict[int, float]]:
    """Per batch B, the least-squares line T_s(B, γ) = a_B + d_B·γ through the measured γ
    points (d_B >= 0), evaluated at those γ: each draft position adds one draft pass and one
    verified token per sequence, so the step time grows about linearly in γ; the fit keeps one
    noisy measurement from deciding a table entry (bench/draft_length.py: single 32-token
    measurements on CPU scatter by ~20%). A fitted value never goes below the batch's smallest
    measurement; a batch with one measured γ is kept as is.

    Example:
        >>> smooth_step_times({1: {0: 1.0, 1: 2.2, 2: 2.8}})
        {1: {0: 1.1, 1: 2.0, 2: 2.9}}
    """
    out = {}
    for b, times in step_s.items():
        gs = sorted(times)
        if len(gs) < 2:
            out[b] = dict(times)
            continue
        mean_g, mean_t = sum(gs) / len(gs), sum(times.values()) / len(gs)
        d = max(0.0, sum((g - mean_g) * (times[g] - mean_t) for g in gs)
                / sum((g - mean_g) ** 2 for g in gs))
        floor = min(times.values())  # one outlier must not tilt a fit to <= 0 at small γ
        out[b] = {g: round(max(floor, mean_t + d * (g - mean_g)), 12) for g in gs}
    return out


def draft_length_at(schedule: Schedule, batch: int) -> int:
    """γ the schedule gives at `batch`, as vLLM's dense lookup does (the last entry carries on)."""
    for first, last, g in schedule:
        if first <= batch <= last:
            return g
    return schedule[-1][2]
