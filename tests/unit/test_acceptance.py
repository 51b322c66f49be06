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


def test_long_contexts_learn_their_own_acceptance_leaning_on_the_shorter_bucket():
    """The lab's draft accepts less deep into a long prompt (4.09 tokens per step on ~40-token
    code prompts, 2.13 on 768-token ones): a long-context request is priced with what long
    contexts accepted, and until they have said much, with what the shorter bucket says."""
    from core.acceptance import context_bucket

    assert [context_bucket(n) for n in (0, 511, 512, 2047, 2048, 9000)] == [
        "", "", "@L512", "@L512", "@L2048", "@L8192"]
    est = AcceptanceEstimator(2, prior_steps=20)
    for _ in range(200):
        est.observe("code", 0.0, [0, 0, 10])  # short: everything accepted
    short = est.alphas("code", 0.0)
    assert short[0] > 0.95
    assert est.alphas("code", 0.0, 3000) == pytest.approx(short)  # no long counts: leans on it
    for _ in range(200):
        est.observe("code", 0.0, [10, 0, 0], context_tokens=900)  # long: nothing accepted
    assert est.alphas("code", 0.0, 900)[0] < 0.05
    assert est.alphas("code", 0.0, 3000)[0] < 0.05   # ≥ 2048 leans on ≥ 512 in turn
    assert est.alphas("code", 0.0) == pytest.approx(short)  # short prompts keep theirs
    assert est.observed_steps("code", 0.0, 900) == pytest.approx(2000, rel=0.5)
    assert set(est.table()) == {("code", "t0"), ("code", "t0@L512")}
    other = AcceptanceEstimator(2)  # shared through the board like any bucket
    other.set_remote([est.local_counts()])
    assert other.alphas("code", 0.0, 900) == pytest.approx(est.alphas("code", 0.0, 900))
