"""Online acceptance estimates: prior at cold start, convergence, decay, temperature buckets."""

import pytest

from core import AcceptanceEstimator, temperature_bucket


def test_cold_start_returns_the_task_prior():
    est = AcceptanceEstimator(4, priors={"code": 0.7, "math": 0.7, "extraction": 0.7,
                                         "chat": 0.5, "creative": 0.4})
    assert est.alphas("code", 0.0) == [0.7] * 4
    assert est.alphas("creative", 1.0) == [0.4] * 4
    assert est.observed_steps("code", 0.0) == 0


def test_converges_on_a_code_only_stream():
    est = AcceptanceEstimator(2)
    for _ in range(200):  # each request: 10 steps, α_1 = 0.9, α_2 = 0.5
        est.observe("code", 0.0, [1, 4.5, 4.5])
    a1, a2 = est.alphas("code", 0.0)
    assert a1 == pytest.approx(0.9, abs=0.01)
    assert a2 == pytest.approx(0.5, abs=0.01)
    assert est.alphas("chat", 0.0) == [est.priors["chat"]] * 2  # other tasks untouched
    assert est.alphas("code", 0.9) == [est.priors["code"]] * 2  # other temperature bucket


def test_decay_follows_a_change_in_acceptance():
    est = AcceptanceEstimator(1, prior_steps=1, half_life_steps=100)
    for _ in range(100):
        est.observe("math", 0.0, [0, 10])  # everything accepted
    for _ in range(100):
        est.observe("math", 0.0, [10, 0])  # nothing accepted
    assert est.alphas("math", 0.0)[0] < 0.05


@pytest.mark.parametrize("t, bucket", [(0.0, "t0"), (0.3, "t≤0.5"), (0.5, "t≤0.5"),
                                       (0.7, "t≤1.0"), (1.5, "t>1.0")])
def test_temperature_buckets(t, bucket):
    assert temperature_bucket(t) == bucket
