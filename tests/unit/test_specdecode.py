"""Leviathan et al. 2023 formulas (core/specdecode.py)."""

import pytest

from core import batched_speedup, expected_tokens


def test_expected_tokens_matches_the_closed_form():
    alphas = [0.8] * 5
    assert expected_tokens(alphas) == pytest.approx((1 - 0.8 ** 6) / (1 - 0.8))
    assert expected_tokens(alphas) == pytest.approx(3.69, abs=0.005)


def test_no_acceptance_gives_one_token_per_step():
    assert expected_tokens([0.0, 0.0, 0.0]) == 1.0
    assert expected_tokens([1.0] * 4) == 5.0


def test_batched_speedup_falls_below_one_when_verification_is_compute_bound():
    # memory-bound: a speculative step costs 1.3 target steps, E[τ] = 3 → 2.3x
    assert batched_speedup(3.0, 0.010, 0.013) == pytest.approx(3.0 * 0.010 / 0.013)
    # compute-bound: verifying γ+1 tokens per sequence costs ~γ+1 target steps
    assert batched_speedup(3.0, 0.100, 0.500) < 1.0
