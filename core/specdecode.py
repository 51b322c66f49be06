"""Speculative-decoding speedup formulas (Leviathan et al. 2023, "Fast Inference from Transformers
via Speculative Decoding", eq. 1 and §3.4), in the per-position form vLLM's counters give.

Notation: γ = num_speculative_tokens, α_i = P(draft token i accepted | tokens 1..i-1 accepted).
"""

from __future__ import annotations

import math
from typing import Sequence

# S at or above which a request goes speculative: `router.min_speedup`'s default, and the
# threshold the autoscaling policy's budget split routes by unless given the configured one.
MIN_SPEEDUP = 1.1


def expected_tokens(alphas: Sequence[float]) -> float:
    """E[τ]: tokens emitted per target verification step, bonus token included.

    E[τ] = 1 + Σ_{i≤γ} Π_{j≤i} α_j; with a constant α this is (1 − α^(γ+1)) / (1 − α)
    (Leviathan et al. 2023, eq. 1). `alphas` has one entry per draft position (length γ).
    """
    total, survive = 1.0, 1.0
    for a in alphas:
        survive *= a
        total += survive
    return total


def batched_speedup(e_tau: float, vanilla_step_s: float, speculative_step_s: float) -> float:
    """S(B) = E[τ] · T_t(B, 1) / (γ·T_d(B) + T_t(B, γ+1)): the one place specserve computes S.

    Args:
        e_tau: expected tokens per verification step.
        vanilla_step_s: T_t(B, 1), seconds of one target decode step at batch B (or, pricing a
            batch job's throughput, the seconds per sequence-step one more sequence adds:
            router/policy.py `ThroughputSpeedup`).
        speculative_step_s: γ·T_d(B) + T_t(B, γ+1), seconds of one speculative step (draft γ
            tokens, then verify γ+1) at batch B, as measured on the speculative pool (or its
            marginal, as above). `math.inf` (a pool that gains nothing) gives S = 0 or inf.
    """
    return e_tau * vanilla_step_s / speculative_step_s


def draft_tokens_at(schedule: Sequence[Sequence[int]] | None, num_speculative_tokens: int,
                    batch: float | None) -> int:
    """γ the speculative engine drafts at a running batch, under vLLM's
    `num_speculative_tokens_per_batch_size` (`schedule`, entries (first, last, k)).

    Mirrors vLLM 0.32 `build_dynamic_sd_schedule_lookup` (v1/spec_decode/dynamic/utils.py): a
    batch inside a range takes its k, one in a gap or beyond the last range carries the previous
    range's k forward, and every k is capped at `num_speculative_tokens`. The scheduler looks it up
    by the requests scheduled in the step; `batch` here is requests per replica and may be
    fractional (a pool's in-flight over its replicas): it is rounded up, at least 1.

    Args:
        schedule: the table, or None (γ = `num_speculative_tokens` at every batch).
        num_speculative_tokens: k, the speculator's configured draft length.
        batch: requests per replica; None gives k (no batch known).

    Returns:
        γ in 0..k (0: the engine runs target-only steps at that batch).
    """
    if not schedule or batch is None:
        return num_speculative_tokens
    b = max(1, math.ceil(batch - 1e-9))
    gamma = num_speculative_tokens
    for first, _last, k in sorted(tuple(e) for e in schedule):
        if first > b:
            break
        gamma = k
    return min(num_speculative_tokens, gamma)
