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
