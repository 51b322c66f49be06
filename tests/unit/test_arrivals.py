"""Offered load per request class (core/arrivals.py): the routers' cumulative counts and the
rates the StatsBoard makes of them for the budget split; and the Serve adapter's use of them
(autoscaling/controller.py `PoolAutoscaler.with_inputs`)."""

from __future__ import annotations

import pytest
from ray.serve.llm.openai_api_models import CompletionRequest

from autoscaling.controller import PoolAutoscaler
from autoscaling.decision import PoolView
from autoscaling.rules import decide
from bench.sim_profiles import GPU
from core import DEFAULT_CONFIG_PATH, AutoscalingConfig, PoolScalingConfig, SpecserveConfig
from core.arrivals import ArrivalCounter, class_key, offered_load
from router.decider import RouteDecider
from router.policy import PoolLoad


def counts(**per_class) -> dict:
    """{key: (requests, tokens)} -> cumulative counts as a router publishes them (E[τ] 2)."""
    return {k: {"requests": r, "tokens": t, "steps": t / 2, "gains": True}
            for k, (r, t) in per_class.items()}


def test_counter_accumulates_tokens_and_verification_steps_per_class():
    c = ArrivalCounter()
    c.observe("code", True, 64, 4.0)
    c.observe("code", True, 32, 2.0)
    c.observe("chat", False, 100, 0.5)  # below 1: one token per step
    got = c.counts()
    assert got[class_key("code", True)] == {"requests": 2, "tokens": 96, "steps": 32.0,
                                            "gains": True}
    assert got[class_key("chat", False)]["steps"] == 100.0
    assert got[class_key("chat", False)]["requests"] == 1
    got[class_key("code", True)]["requests"] = 99  # a copy: publishing cannot change the count
    assert c.counts()[class_key("code", True)]["requests"] == 2


def test_rate_is_the_difference_over_the_window_summed_over_routers():
    a = (0.0, [(30.0, counts(code=(10, 500))), (100.0, counts(code=(40, 2000)))])
    b = (0.0, [(35.0, counts(code=(0, 0), chat=(1, 10))), (100.0, counts(code=(7, 350),
                                                                          chat=(1, 10)))])
    (code,) = offered_load([a, b], now=100.0, window_s=60.0)  # chat: no arrival in the window
    assert code["class"] == "code"
    assert code["requests_per_s"] == pytest.approx(30 / 70 + 7 / 65)
    assert code["tokens_per_s"] == pytest.approx(1500 / 70 + 350 / 65)
    assert code["expected_tokens"] == pytest.approx(2.0)  # Σ tokens / Σ steps


def test_a_router_that_stopped_reporting_fades_out():
    """A replica gone (or a batch job done) at t = 50: its 10 requests in the window count over
    the window, not at its last live rate."""
    gone = (0.0, [(30.0, counts(code=(0, 0))), (50.0, counts(code=(20, 400)))])
    (load,) = offered_load([gone], now=100.0, window_s=60.0)
    assert load["requests_per_s"] == pytest.approx(20 / 70)


def test_a_router_started_inside_the_window_counts_from_zero_at_its_start():
    (load,) = offered_load([(80.0, [(100.0, counts(code=(20, 400)))])], now=100.0, window_s=60.0)
    assert load["tokens_per_s"] == pytest.approx(400 / 20)


def test_counts_from_before_the_history_are_not_taken_for_the_window():
    """A board that restarted knows only the reports since: a long-running router's first one
    is its base, not zero."""
    old_router = (0.0, [(90.0, counts(code=(1000, 50000))), (100.0, counts(code=(1010, 50500)))])
    (load,) = offered_load([old_router], now=100.0, window_s=60.0)
    assert load["tokens_per_s"] == pytest.approx(500 / 10)
    assert offered_load([(0.0, [(95.0, counts(code=(1000, 50000)))])], 100.0, 60.0) == []


def test_the_decider_counts_every_decided_request_by_class():
    decider = RouteDecider(SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH),
                           ["vanilla", "speculative"])
    loads = {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 0)}
    for route in ("auto", "vanilla"):
        decider.decide(decider.parse(CompletionRequest(
            model="m", prompt="def f(x):\n    return", max_tokens=48, temperature=0,
            route=route)), loads)
    got = decider.arrivals.counts()
    assert {k: (c["requests"], c["tokens"]) for k, c in got.items()} == {
        "code|speculative": (1, 48), "code|vanilla": (1, 48)}
    assert 0 < got["code|speculative"]["steps"] <= 48  # 48 tokens at the router's E[τ] >= 1
    decider.decide(decider.parse(CompletionRequest(model="m", prompt=["def f(x):", "def g(y):"],
                                                   n=2, max_tokens=10, temperature=0)), loads)
    assert decider.arrivals.counts()["code|speculative"]["tokens"] == 48 + 4 * 10  # 4 sequences
    decider.set_pin("vanilla")  # a pin keeps every class off the speculative pool
    decider.decide(decider.parse(CompletionRequest(model="m", prompt="def f(x):", max_tokens=5,
                                                   temperature=0)), loads)
    assert decider.arrivals.counts()["code|vanilla"]["tokens"] == 48 + 5


def test_adapter_feeds_the_boards_inputs_to_the_budget_split():
    cfg = AutoscalingConfig(enabled=True, policy="budget", budget_accelerators=64,
                            upscale_delay_s=0, downscale_delay_s=0, slo_tpot_ms=10.0,
                            vanilla=PoolScalingConfig(min_replicas=0, max_replicas=16),
                            speculative=PoolScalingConfig(min_replicas=0, max_replicas=16))
    policy = PoolAutoscaler(cfg.model_dump(mode="json"), {"vanilla": 4, "speculative": 4},
                            {"vanilla": 128, "speculative": 128})
    views = {p: PoolView(1, 1, ongoing=1.0, waiting=0.0, memory_bound=0.5, tensor_parallel_size=4)
             for p in ("vanilla", "speculative")}
    e = GPU.expected_tokens
    inputs = {"demand": [{"class": "code|speculative", "tokens_per_s": 720.0,
                          "requests_per_s": 3.0, "expected_tokens": e["code"], "gains": True},
                         {"class": "chat|speculative", "tokens_per_s": 80.0,
                          "requests_per_s": 1.0, "expected_tokens": e["chat"], "gains": True}],
              "step_times": {p: {str(b): s for b, s in GPU.profiles[p].items()}
                             for p in ("vanilla", "speculative")}}
    fed, demand = policy.with_inputs(views, inputs)
    assert fed["speculative"].step_times == tuple(sorted(GPU.profiles["speculative"].items()))
    assert fed["vanilla"].max_num_seqs == 128 and [d.tokens_per_s for d in demand] == [720, 80]
    decisions, state = decide(fed, cfg, {}, 0.0, demand)
    # 800 tok/s, code-heavy, on 1 + 1 TP=4 replicas: the split frees the vanilla replica (the
    # budget's table, with its predicted gain: 4 accelerators instead of 8), where the per-pool
    # rules would hold steady; the next tick hands over
    assert decisions["vanilla"].reason == "save"
    assert decisions["vanilla"].gain["accelerators"] == [8, 4]
    decisions, _ = decide(fed, cfg, state, 1.0, demand)
    assert (decisions["vanilla"].replicas, decisions["speculative"].replicas) == (0, 1)
    assert policy.with_inputs(views, None) == (views, None)  # no answer yet: the rules
    assert policy.with_inputs(views, {"demand": None, "step_times": {}}) == (views, None)
