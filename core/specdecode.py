"""Speculative-decoding speedup formulas (Leviathan et al. 2023, "Fast Inference from Transformers
via Speculative Decoding", eq. 1 and §3.4), in the per-position form vLLM's counters give.

Notation: γ = num_speculative_tokens, α_i = P(draft token i accepted | tokens 1..i-1 accepted),
c = T_draft / T_target for one forward pass.
"""

from __future__ import annotations

from typing import Sequence


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


def walltime_speedup(alphas: Sequence[float], cost_ratio: float) -> float:
    """S = E[τ] / (γ·c + 1): speedup of one sequence when the target step time does not grow with
    the γ+1 verified tokens (memory-bound decode; Leviathan et al. 2023, Theorem 3.8).

    Example: α = 0.8, γ = 5, c = 0.05 → E[τ] = 3.69, S ≈ 2.95.
    """
    return expected_tokens(alphas) / (len(alphas) * cost_ratio + 1)


def batched_speedup(e_tau: float, vanilla_step_s: float, speculative_step_s: float) -> float:
    """S(B) = E[τ] · T_t(B, 1) / (γ·T_d(B) + T_t(B, γ+1)): the one place specserve computes S.

    Args:
        e_tau: expected tokens per verification step.
        vanilla_step_s: T_t(B, 1), seconds of one target decode step at batch B (or, pricing a
            batch job's throughput, the seconds per sequence-step one more sequence adds:
            router/speedup.py `ThroughputSpeedup`).
        speculative_step_s: γ·T_d(B) + T_t(B, γ+1), seconds of one speculative step (draft γ
            tokens, then verify γ+1) at batch B, as measured on the speculative pool (or its
            marginal, as above). `math.inf` (a pool that gains nothing) gives S = 0 or inf.
    """
    return e_tau * vanilla_step_s / speculative_step_s


def alphas_from_histogram(histogram: Sequence[int]) -> list[float | None]:
    """Per-position acceptance from vLLM's per-request `acceptance_histogram`.

    `histogram[j]` counts verification steps that accepted exactly j draft tokens (j = 0..γ).
    Position i (1-based) is reached in steps that accepted ≥ i−1 tokens and accepted in those that
    accepted ≥ i: α_i = Σ_{j≥i} h[j] / Σ_{j≥i−1} h[j]; None where no step reached position i.
    """
    out: list[float | None] = []
    reached = sum(histogram)
    for i in range(1, len(histogram)):
        accepted = sum(histogram[i:])
        out.append(accepted / reached if reached else None)
        reached = accepted
    return out
