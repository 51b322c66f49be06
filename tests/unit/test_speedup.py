"""Leviathan et al. 2023 formulas and the histogram → per-position α conversion."""

import pytest

from router.speedup import alphas_from_histogram, batched_speedup, expected_tokens, \
    walltime_speedup


def test_worked_example_from_issue_3():
    alphas = [0.8] * 5
    assert expected_tokens(alphas) == pytest.approx((1 - 0.8 ** 6) / (1 - 0.8))
    assert expected_tokens(alphas) == pytest.approx(3.69, abs=0.005)
    assert walltime_speedup(alphas, 0.05) == pytest.approx(2.95, abs=0.01)


def test_no_acceptance_gives_one_token_per_step():
    assert expected_tokens([0.0, 0.0, 0.0]) == 1.0
    assert expected_tokens([1.0] * 4) == 5.0


def test_batched_speedup_falls_below_one_when_verification_is_compute_bound():
    # memory-bound: a speculative step costs 1.3 target steps, E[τ] = 3 → 2.3x
    assert batched_speedup(3.0, 0.010, 0.013) == pytest.approx(3.0 * 0.010 / 0.013)
    # compute-bound: verifying γ+1 tokens per sequence costs ~γ+1 target steps
    assert batched_speedup(3.0, 0.100, 0.500) < 1.0


def test_alphas_from_histogram():
    # 10 steps: 2 accepted 0, 3 accepted 1, 5 accepted all 2 drafts
    assert alphas_from_histogram([2, 3, 5]) == [pytest.approx(0.8), pytest.approx(5 / 8)]
    assert alphas_from_histogram([4, 0, 0]) == [0.0, None]
