"""The step-time model (core/step_time.py) at high load: bounded by the engine's running batch,
never extrapolated flat."""

import pytest

from core import StepTimeModel


def model(points, max_batch=None):
    m = StepTimeModel(max_batch=max_batch)
    m.load_profile(points)
    return m


def test_interpolates_between_buckets_and_is_flat_below():
    m = model({1: 0.010, 4: 0.030})
    assert m.step_time(0.5) == pytest.approx(0.010)
    assert m.step_time(2) == pytest.approx(0.020)  # halfway in log2(B)


def test_extends_past_the_largest_bucket_along_the_last_segment():
    m = model({32: 0.040, 64: 0.080})
    assert m.step_time(128) == pytest.approx(0.160)  # slope 0.04 s per 32 sequences
    assert model({64: 0.080}).step_time(128) == pytest.approx(0.160)  # one point: ∝ B
    assert model({32: 0.080, 64: 0.060}).step_time(128) == pytest.approx(0.070)  # never faster


def test_requests_beyond_max_num_seqs_wait():
    m = model({16: 0.020, 32: 0.040}, max_batch=32)
    assert m.step_time(32) == pytest.approx(0.040)
    assert m.step_time(64) == pytest.approx(0.080)   # 64 share 32 slots: half the rate each
    assert m.step_time(96) == pytest.approx(0.120)


def test_a_sample_taken_with_a_queue_is_filed_at_the_running_batch():
    m = model({1: 0.010}, max_batch=8)
    m.observe(100, 0.050)   # 100 in the engine, 8 running: the ITL of batch 8
    assert m.points() == {1: 0.010, 8: 0.050}
    assert m.step_time(16) == pytest.approx(0.100)


def test_a_bucket_measured_slower_than_a_larger_one_is_averaged_with_it():
    """Served samples at 16 and 32 taken at noisy moments (the reference benchmark's speculative
    pool: 66 ms at 16 beside 82 ms at 32 is fine, 24.7 at 8 above 13.3 at 4 is fine; here 2
    measured above 4): the fit pools the violators, so S(B) cannot rise and fall with noise."""
    m = model({1: 0.008, 2: 0.022, 4: 0.012, 8: 0.027})
    assert m.points() == pytest.approx({1: 0.008, 2: 0.017, 4: 0.017, 8: 0.027})
    assert m.step_time(2) <= m.step_time(3) <= m.step_time(4) <= m.step_time(8)
    m.observe(2, 0.010)  # the first served sample replaces the profile point: monotone again
    assert m.points() == pytest.approx({1: 0.008, 2: 0.010, 4: 0.012, 8: 0.027})
    assert m.served(2) and not m.served(4)


def test_context_adds_kappa_per_sequence_per_token_beyond_the_profiles():
    m = model({1: 0.010, 16: 0.040})
    assert m.step_time(16, 5000) == pytest.approx(0.040)  # κ unknown: context not modelled
    m.set_context_cost(1e-6, 100)
    assert m.step_time(16) == pytest.approx(0.040)        # at L_ref, as profiled
    assert m.step_time(16, 100) == pytest.approx(0.040)
    assert m.step_time(16, 4100) == pytest.approx(0.040 + 1e-6 * 16 * 4000)
    assert m.step_time(1, 1100) == pytest.approx(0.010 + 1e-6 * 1000)
    assert m.step_time(16, 0) == pytest.approx(0.040 - 1e-6 * 16 * 100)  # shorter: cheaper
    assert m.step_time(1, 0) >= 0.010 / 2  # never below half the profiled step


def test_a_long_context_sample_is_filed_at_the_profile_context():
    """A served sample at 16 sequences of 2100 tokens each, 72 ms per step, is 40 ms at the
    profile's 100 tokens: the bucket keeps what batch 16 costs, and the context term adds the rest
    for whoever asks at 2100 again."""
    m = model({1: 0.010, 16: 0.040})
    m.set_context_cost(1e-6, 100)
    m.observe(16, 0.040 + 1e-6 * 16 * 2000, context=2100)
    assert m.points()[16] == pytest.approx(0.040)
    assert m.step_time(16, 2100) == pytest.approx(0.072)
    m.observe(16, 0.072)  # unknown context: taken as measured at L_ref
    assert m.points()[16] == pytest.approx(0.040 + 0.2 * 0.032)


@pytest.mark.parametrize("kappa, ref", [(float("nan"), 10), (-1e-6, 10), (1e-6, float("inf"))])
def test_a_bad_context_cost_leaves_context_out(kappa, ref):
    m = model({1: 0.010})
    m.set_context_cost(kappa, ref)
    assert (m.context_s, m.step_time(1, 10_000)) == (0.0, pytest.approx(0.010))
