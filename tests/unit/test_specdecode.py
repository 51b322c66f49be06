"""Leviathan et al. 2023 formulas (core/specdecode.py)."""

import pytest

from core import batched_speedup, expected_tokens
from core.specdecode import draft_tokens_at


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


@pytest.mark.parametrize("schedule", [
    [[1, 7, 4], [8, 31, 3], [32, 64, 2]],
    [[1, 16, 3], [32, 128, 2]],         # a gap: 17-31 carry 3 forward
    [[1, 4, 6], [5, 8, 0]],             # k above the speculator's: capped; beyond 8: 0 carried
    [[1, 2, 1]],
])
def test_draft_tokens_at_matches_vllms_dense_schedule(schedule):
    """γ(B) as vLLM's scheduler looks it up (`build_dynamic_sd_schedule_lookup`), batch by batch;
    a fractional per-replica batch rounds up."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    k, max_batch = 4, 160
    dense = build_dynamic_sd_schedule_lookup(schedule, max_batch, k)
    assert [draft_tokens_at(schedule, k, b) for b in range(1, max_batch + 1)] == dense[1:]
    assert draft_tokens_at(schedule, k, 7.5) == dense[8]
    assert draft_tokens_at(schedule, k, 0.5) == dense[1]
    assert draft_tokens_at(None, k, 100) == k and draft_tokens_at(schedule, k, None) == k
