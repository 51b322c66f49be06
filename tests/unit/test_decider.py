"""The route decider (router/decider.py): runtime pin, and acceptance shared across ingress replicas."""

import pytest
from ray.serve.llm.openai_api_models import CompletionRequest

from core import DEFAULT_CONFIG_PATH, AcceptanceEstimator, PoolStats, SpecserveConfig
from core.specdecode import expected_tokens
from router.decider import RouteDecider
from router.errors import RequestError
from router.policy import PoolLoad

LOADS = {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 0)}


@pytest.fixture
def decider() -> RouteDecider:
    return RouteDecider(SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH), ["vanilla", "speculative"])


@pytest.fixture
def measured(decider) -> RouteDecider:
    """A decider that knows both pools' step time at batch 1: vanilla 10 ms, speculative 20 ms."""
    decider.speedup_model.update_pools({"vanilla": PoolStats(profile={1: 0.010}),
                                        "speculative": PoolStats(profile={1: 0.020})})
    return decider


def code(**kw) -> CompletionRequest:
    return CompletionRequest(model="m", prompt="def f(x):\n    return", temperature=0, **kw)


def test_runtime_pin_overrides_config_and_unpins(measured):
    decider = measured
    assert (decider.pin, decider.pin_source) == ("auto", "config")
    decider.set_pin("vanilla")
    _, d = decider.decide(decider.parse(code()), LOADS)
    assert (d.route, d.reason, decider.pin_source) == ("vanilla", "pinned", "runtime")
    _, d = decider.decide(decider.parse(code(route="speculative")), LOADS)
    assert (d.route, d.reason) == ("speculative", "requested")  # a request's own route wins
    decider.set_pin("auto")  # a runtime "auto" overrides a config pin too
    _, d = decider.decide(decider.parse(code()), LOADS)
    assert d.reason in ("speculation_pays", "speculation_costs")
    decider.set_pin(None)
    assert (decider.pin, decider.pin_source) == ("auto", "config")


def test_a_forced_route_tells_its_speedup_and_leaves_the_hysteresis_alone(measured):
    """A requested or pinned route carries the S the router predicts for the request (the
    predicted-vs-realized panel averages over every request the speculative pool serves); only
    the router's own choices move its hysteresis memory."""
    decider = measured
    _, auto = decider.decide(decider.parse(code()), LOADS)
    assert (auto.route, auto.reason) == ("speculative", "speculation_pays")
    _, forced = decider.decide(decider.parse(code(route="vanilla")), LOADS)
    assert (forced.route, forced.reason, forced.speedup) == ("vanilla", "requested",
                                                             auto.speedup)
    decider.set_pin("vanilla")
    _, pinned = decider.decide(decider.parse(code()), LOADS)
    assert (pinned.route, pinned.reason, pinned.speedup) == ("vanilla", "pinned", auto.speedup)
    assert decider._last_auto_route["code"] == "speculative"  # neither forced route counted


@pytest.mark.parametrize("pin, message", [("fast", "must be one of"), (3, "must be one of")])
def test_bad_pin_names_the_field(decider, pin, message):
    with pytest.raises(ValueError, match=f"pin: {message}"):
        decider.set_pin(pin)


def test_pin_to_a_pool_the_application_lacks_is_refused():
    d = RouteDecider(SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH), ["vanilla"])
    with pytest.raises(ValueError, match="pin: pool 'speculative' is not configured"):
        d.set_pin("speculative")


def test_learned_acceptance_moves_the_speedup(measured):
    decider = measured
    _, before = decider.decide(decider.parse(code()), LOADS)
    features, _ = decider.decide(decider.parse(code()), LOADS)
    decider.learn(features, {"metrics": {"speculative_decoding": {
        "acceptance_histogram": [400, 0, 0, 0, 0]}}})  # nothing accepted in 400 steps
    _, after = decider.decide(decider.parse(code()), LOADS)
    assert after.speedup < 0.6 * before.speedup


def test_replicas_estimate_from_each_others_observations():
    a, b = AcceptanceEstimator(2, prior_steps=1), AcceptanceEstimator(2, prior_steps=1)
    for _ in range(50):
        a.observe("code", 0.0, [0, 0, 10])    # replica a: everything accepted
        b.observe("code", 0.0, [10, 0, 0])    # replica b: nothing accepted
    alone = a.alphas("code", 0.0)
    a.set_remote([b.local_counts()])
    merged = a.alphas("code", 0.0)
    assert alone[0] > 0.99 and merged[0] == pytest.approx(0.5, abs=0.01)
    assert a.observed_steps("code", 0.0) == pytest.approx(2 * b.observed_steps("code", 0.0))
    b.set_remote([a.local_counts()])  # symmetric: both replicas see the same estimate
    assert b.alphas("code", 0.0) == pytest.approx(merged)
    a.set_remote([])  # the other replica went away: its counts go with it
    assert a.alphas("code", 0.0) == pytest.approx(alone)


def test_counts_published_under_another_num_speculative_tokens_are_ignored():
    a, b = AcceptanceEstimator(2), AcceptanceEstimator(4)
    b.observe("math", 0.0, [0, 0, 0, 0, 10])
    a.set_remote([b.local_counts()])
    assert a.alphas("math", 0.0) == [a.priors["math"]] * 2


def test_speedup_curve_from_profiles(decider):
    est = decider.speedup_model
    assert est.curve("code", 0.0) == []  # nothing profiled yet
    est.update_pools({"vanilla": PoolStats(profile={1: 0.010, 8: 0.020, 64: 0.100}),
                      "speculative": PoolStats(profile={1: 0.020, 8: 0.060, 64: 0.400})})
    rows = est.curve("code", 0.0)
    e_tau = est.expected_tokens("code", 0.0)
    assert [r["batch"] for r in rows] == [1, 8, 64]
    assert [r["speedup"] for r in rows] == pytest.approx(
        [e_tau * 0.5, e_tau / 3, e_tau / 4], abs=1e-3)


def test_steps_without_drafts_count_as_accepting_nothing(decider):
    """An n-gram speculator without a match decodes one token per step that vLLM's histogram does
    not count: 1 prefill token + 2 drafted steps (4 + 5 tokens) + 10 undrafted steps = 20 tokens."""
    features, _ = decider.decide(decider.parse(code()), LOADS)
    decider.learn(features, {"usage": {"completion_tokens": 20}, "metrics": {
        "speculative_decoding": {"acceptance_histogram": [0, 0, 0, 1, 1]}}})
    est = decider.speedup_model.acceptance
    assert est.observed_steps("code", 0.0) == 12
    plain = RouteDecider(decider.cfg, decider.pools)
    plain.learn(features, {"metrics": {"speculative_decoding": {
        "acceptance_histogram": [0, 0, 0, 1, 1]}}})  # no usage: only the drafted steps
    assert plain.speedup_model.acceptance.observed_steps("code", 0.0) == 2


def test_separate_pools_predict_step_times_at_their_own_batch(decider):
    est = decider.speedup_model
    est.update_pools({"vanilla": PoolStats(profile={1: 0.010, 64: 0.100}),
                      "speculative": PoolStats(profile={1: 0.020, 64: 0.400})})
    step_s = est.pool_step_s({"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 63)})
    assert 1000 * step_s["vanilla"] == pytest.approx(10.0)       # its own batch 1
    assert 1000 * step_s["speculative"] == pytest.approx(400.0)  # its own batch 64


def test_every_step_sample_is_kept_at_the_pools_own_batch(decider):
    from core import EngineStats

    est = decider.speedup_model
    busy = PoolStats(engine=EngineStats(num_requests_running=5, itl_count=130))
    est.update_pools({"vanilla": busy, "speculative": PoolStats(
        step_samples=[("r1", 1, 4.0, 0.050)])})
    est.update_pools({"vanilla": busy, "speculative": PoolStats(
        step_samples=[("r1", 1, 4.0, 0.050), ("r2", 7, 1.0, 0.020)])})  # r1's again: once
    assert est.step_times["speculative"].points() == {1: 0.020, 4: 0.050}


def _engine(running, waiting, iterations, outputs, itl_sum_s):
    from core import EngineStats

    return EngineStats(num_requests_running=running, num_requests_waiting=waiting,
                       iterations=iterations, itl_count=outputs, itl_sum_s=itl_sum_s)


def test_window_samples_time_a_request_step_by_inter_token_latency():
    from core import busy_window_samples

    # Over 2 s, 4 running and 4 waiting throughout; 25 engine steps; 40 outputs of running
    # requests whose inter-token latencies sum to 4.0 s.
    engine, request = busy_window_samples(_engine(4, 4, 100, 500, 50.0),
                                          _engine(4, 4, 125, 540, 54.0), wall_s=2.0)
    assert engine == (4.0, pytest.approx(0.08))  # 2 s / 25 steps at running batch 4
    # a running request waits 0.1 s between outputs: 0.08 s of its own steps plus the steps
    # that skipped it; filed at the 8 requests the engine holds
    assert request == (8.0, pytest.approx(0.1))
    # idle time between requests is in Δwall but in no inter-token latency
    _, request = busy_window_samples(_engine(1, 0, 0, 0, 0.0), _engine(1, 0, 20, 19, 0.19),
                                     wall_s=0.5)
    assert request == (1.0, pytest.approx(0.01))


@pytest.mark.parametrize("prev_n,now_n,kept", [
    ((2, 0), (3, 0), True),  # one request more: kept at any batch
    ((1, 0), (2, 0), True),
    ((12, 4), (16, 4), True),  # 16 -> 20 requests in the engine, within the ratio
    ((16, 0), (4, 0), False),  # a cell draining: its steps ran at 16 and at 4
    ((4, 0), (12, 12), False),  # a cell starting
    ((1, 0), (3, 0), False),
])
def test_window_samples_keep_a_request_step_only_while_the_count_is_steady(prev_n, now_n, kept):
    from core import busy_window_samples

    prev, now = _engine(*prev_n, 100, 500, 50.0), _engine(*now_n, 110, 540, 54.0)
    engine, request = busy_window_samples(prev, now, wall_s=0.5, steady_ratio=1.5)
    assert engine is not None  # the autoscaler's engine step is kept either way
    n = (sum(prev_n) + sum(now_n)) / 2
    assert request == ((n, pytest.approx(0.1)) if kept else None)
    # without a ratio every window gives its sample
    assert busy_window_samples(prev, now, wall_s=0.5)[1] == (n, pytest.approx(0.1))


def test_decode_only_window_samples_leave_out_steps_that_ran_a_prefill():
    from core import EngineStats, busy_window_samples

    # 40 outputs over the window, 4.0 s of inter-token latency; 30 of them in decode-only
    # iterations, 1.5 s: the other 10 waited 2.5 s behind prefills.
    prev = EngineStats(num_requests_running=4, iterations=100, itl_count=500, itl_sum_s=50.0,
                       decode_itl_count=400, decode_itl_sum_s=20.0)
    now = EngineStats(num_requests_running=4, iterations=125, itl_count=540, itl_sum_s=54.0,
                      decode_itl_count=430, decode_itl_sum_s=21.5)
    _, every = busy_window_samples(prev, now, wall_s=2.0)
    _, decode = busy_window_samples(prev, now, wall_s=2.0, decode_only=True)
    assert every == (4.0, pytest.approx(0.1)) and decode == (4.0, pytest.approx(0.05))
    # a window whose every iteration ran a prefill has no decode-only sample
    now.decode_itl_count, now.decode_itl_sum_s = 400, 20.0
    assert busy_window_samples(prev, now, wall_s=2.0, decode_only=True)[1] is None
    total = EngineStats(); total.add(prev); total.add(now)
    assert (total.decode_itl_count, total.decode_itl_sum_s) == (800, 40.0)


def test_decode_only_latencies_are_those_of_iterations_without_a_first_token():
    from vllm.v1.metrics.stats import IterationStats

    from deployments.engine_metrics import decode_only_latencies

    decode = IterationStats()
    decode.inter_token_latencies_iter = [0.04, 0.05]
    prefill = IterationStats()
    prefill.inter_token_latencies_iter = [0.3, 0.3]
    prefill.time_to_first_tokens_iter = [0.35]
    assert decode_only_latencies(decode) == [0.04, 0.05]
    assert decode_only_latencies(prefill) == [] and decode_only_latencies(None) == []


@pytest.mark.parametrize("prev,now", [((0, 0, 0, 0, 0.0), (4, 0, 10, 40, 0.4)),
                                      ((4, 0, 10, 40, 0.4), (0, 0, 20, 80, 0.8)),
                                      ((4, 0, 10, 40, 0.4), (4, 0, 10, 40, 0.4))])
def test_window_samples_need_a_busy_window_with_progress(prev, now):
    from core import busy_window_samples

    engine, request = busy_window_samples(_engine(*prev), _engine(*now), wall_s=1.0)
    assert engine is None and request is None


def test_first_sample_of_a_bucket_replaces_its_profile_point():
    from core import StepTimeModel

    model = StepTimeModel(weight=0.2)
    model.load_profile({1: 0.028, 4: 0.060})
    model.observe(1, 0.020)
    assert model.points() == {1: 0.020, 4: 0.060}
    model.observe(1, 0.030)  # later samples average (EWMA)
    assert model.points()[1] == pytest.approx(0.022)
    model.load_profile({1: 0.5})  # a profile never overrides what was measured
    assert model.points()[1] == pytest.approx(0.022)


@pytest.mark.parametrize("kw, param", [({"n": 100}, "n"), ({"temperature": 5}, "temperature"),
                                       ({"use_beam_search": True}, "use_beam_search"),
                                       ({"max_tokens": 5000}, "max_tokens")])
def test_parse_refuses_what_the_engines_cannot_serve(decider, kw, param):
    """The one validation the ingress and the batch driver both run (router/request.py)."""
    with pytest.raises(RequestError) as e:
        decider.parse(CompletionRequest(model="m", prompt="def f(x):\n", **kw))
    assert (e.value.status, e.value.param) == (400, param)


def test_parse_returns_the_prompt_length_the_decision_uses(decider):
    assert decider.parse(code(max_tokens=8)).prompt_len >= len("def f(x):\n    return") // 4


def test_route_admits_refuses_and_explains(measured):
    """`route`: the one call the ingress and the batch driver decide through (parse once, then
    route): headers explain the decision; a full pool spills; no room anywhere is a 429 counted
    as rejected_overload; without admission (a batch job) the bound does not apply."""
    import asyncio

    decider = measured
    cap = decider.cfg.server.max_in_flight_per_replica
    request = decider.parse(code(route="speculative", n=2))
    assert "route" not in (request.body.model_extra or {}) and request.sequences == 2
    routed = asyncio.run(decider.route(request))
    assert routed.refusal is None and routed.decision.route == "speculative"
    assert routed.headers["x-specserve-route"] == "speculative"
    assert routed.headers["x-specserve-reason"] == "requested"
    assert float(routed.headers["x-specserve-speedup"]) == pytest.approx(routed.decision.speedup,
                                                                         abs=0.01)
    decider.pressure.start("speculative", cap)  # the speculative pool is full
    decider.set_pin("speculative")
    pinned = asyncio.run(decider.route(decider.parse(code())))
    assert (pinned.decision.route, pinned.decision.reason) == ("vanilla", "pool_saturated")
    forced = asyncio.run(decider.route(decider.parse(code(route="speculative"))))
    assert (forced.refusal.status, forced.refusal.outcome) == (429, "rejected_overload")
    assert forced.headers == {"x-specserve-route": "speculative",
                              "x-specserve-reason": "requested"}
    batch = asyncio.run(decider.route(decider.parse(code(route="speculative")), admission=False))
    assert batch.refusal is None and batch.decision.route == "speculative"


def test_route_refuses_what_no_pool_may_take_as_a_400():
    import asyncio

    decider = RouteDecider(SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH), ["speculative"])
    with pytest.raises(RequestError) as e:
        asyncio.run(decider.route(decider.parse(code(route="vanilla"))))
    assert (e.value.status, e.value.param) == (400, "route")


def test_route_with_no_pool_up_is_a_503_counted_nowhere(measured):
    import asyncio

    from router.decider import PoolHealth

    health = PoolHealth()
    health.observe({"vanilla": PoolStats(replicas=1), "speculative": PoolStats(replicas=1)})
    health.observe({"vanilla": PoolStats(replicas=0), "speculative": PoolStats(replicas=0)})
    decider = RouteDecider(measured.cfg, measured.pools, health=health)
    routed = asyncio.run(decider.route(decider.parse(code())))
    assert (routed.refusal.status, routed.refusal.outcome, routed.headers) == (503, None, {})


def test_a_sampled_request_waits_out_a_starting_speculative_pool_but_not_a_lossy_one():
    """Speculative pool only: until a replica has reported its sampling check, a request at
    temperature > 0 gets 503 (retry: the pool is starting); once one has reported it failing,
    400 (the request cannot run here)."""
    cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    decider = RouteDecider(cfg, ["speculative"])
    loads = {"speculative": PoolLoad(1, 0, lossless_sampling=False)}
    sampled = CompletionRequest(model="m", prompt="Once upon a time", temperature=0.5)
    with pytest.raises(RequestError) as starting:
        decider.decide(decider.parse(sampled), loads)
    assert (starting.value.status, starting.value.param) == (503, "temperature")
    decider.pressure.remote = {"speculative": PoolStats(replicas=1, lossless_sampling=False)}
    with pytest.raises(RequestError) as lossy:
        decider.decide(decider.parse(sampled), loads)
    assert (lossy.value.status, lossy.value.param) == (400, "temperature")
    _, greedy = decider.decide(decider.parse(code()), loads)
    assert greedy.route == "speculative"


def test_pays_up_to_batch_means_every_batch_up_to_it():
    from router.admin import pays_up_to
    rows = [{"batch": b} for b in (1, 2, 4, 8, 128)]
    assert pays_up_to(rows, [1, 2, 4, 128]) == 4  # 128 pays again, but 8 does not
    assert pays_up_to(rows, [2, 4]) == 0  # not even at batch 1
    assert pays_up_to(rows, [1, 2, 4, 8, 128]) == 128
    assert pays_up_to([], []) == 0


def long_code(words: int) -> CompletionRequest:
    """A code completion whose prompt is `words` lines of code before the same question."""
    return CompletionRequest(model="m", temperature=0, max_tokens=64,
                             prompt="x = 1\n" * words + "def f(x):\n    return")


def test_a_long_prompt_goes_speculative_where_a_short_one_goes_vanilla(decider):
    """MagicDec's regime (arXiv:2408.11049): at batch 16 the speculative step costs 3x the
    vanilla one, so S < 1 for short prompts; both read the same KV per step (κ alike), so with
    long contexts the KV read dominates both steps and S rises towards E[τ]."""
    decider.speedup_model.update_pools({
        "vanilla": PoolStats(profile={1: 0.010, 16: 0.040}, profile_context=(2e-6, 60.0)),
        "speculative": PoolStats(profile={1: 0.015, 16: 0.120}, profile_context=(2e-6, 60.0))})
    loads = {"vanilla": PoolLoad(1, 15), "speculative": PoolLoad(1, 15)}
    short = decider.parse(long_code(0))
    long = decider.parse(long_code(150))  # 900 bytes: tokenized
    assert short.features.context_tokens < 60 < 500 < long.features.context_tokens
    _, d_short = decider.decide(short, loads)
    _, d_long = decider.decide(long, loads)
    assert (d_short.route, d_short.reason) == ("vanilla", "speculation_costs")
    assert d_long.speedup > d_short.speedup
    # the pools' sequences in flight are as long: the whole batch reads long KV
    long_loads = {p: PoolLoad(1, 15, context_tokens=15 * 4000) for p in loads}
    _, d_batch = decider.decide(long, long_loads)
    assert (d_batch.route, d_batch.reason) == ("speculative", "speculation_pays")
    assert d_batch.speedup > d_long.speedup


def test_context_tokens_are_the_prompt_and_half_the_output_limit(decider):
    p = decider.parse(CompletionRequest(model="m", prompt="hi", max_tokens=100))
    assert p.features.context_tokens == 1 + 50  # 3 bytes: about 1 token by bytes / 4
    long = decider.parse(CompletionRequest(model="m", prompt="x = 1\n" * 150, max_tokens=10))
    assert long.features.context_tokens == len(decider.parser.tokenizer.encode(
        "x = 1\n" * 150).ids) + 5
    default = decider.parse(CompletionRequest(model="m", prompt="hi"))  # OpenAI's 16 tokens
    assert default.features.context_tokens == 1 + 16 // 2


def test_sequences_in_flight_carry_their_context_to_the_loads(decider):
    decider.pressure.start("vanilla", 2, 2 * 500)
    decider.pressure.start("vanilla", 1, 100)
    assert decider.loads()["vanilla"].context_tokens == 1100
    assert decider.pressure.pool_stats()["vanilla"].mean_context == pytest.approx(1100 / 3)
    decider.pressure.finish("vanilla", 2, 2 * 500)
    assert decider.loads()["vanilla"].context_tokens == 100


def test_acceptance_learned_on_long_prompts_prices_long_prompts_only(measured):
    decider = measured
    long = decider.parse(long_code(150))
    features, before = decider.decide(long, LOADS)
    for _ in range(50):  # the long code prompts accept nothing
        decider.learn(features, {"metrics": {"speculative_decoding": {
            "acceptance_histogram": [40, 0, 0, 0, 0]}}})
    _, after = decider.decide(long, LOADS)
    _, short = decider.decide(decider.parse(code()), LOADS)
    assert after.speedup < 0.5 * before.speedup
    assert short.speedup == pytest.approx(before.speedup, rel=0.05)


def _with_schedule(schedule) -> RouteDecider:
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    data["speculative"]["speculator"]["num_speculative_tokens_per_batch_size"] = schedule
    decider = RouteDecider(SpecserveConfig.from_dict(data), ["vanilla", "speculative"])
    decider.speedup_model.update_pools({"vanilla": PoolStats(profile={1: 0.010, 8: 0.012}),
                                        "speculative": PoolStats(profile={1: 0.020, 8: 0.020})})
    return decider


def test_a_per_batch_size_table_prices_the_draft_length_the_engine_runs_at_that_batch():
    """Under vLLM's `num_speculative_tokens_per_batch_size` the speculative engine drafts γ(B):
    E[τ] at the speculative pool's batch (in flight + 1 per replica) uses the first γ(B)
    positions only; without a table, k at every batch."""
    k = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).speculative.speculator.num_speculative_tokens
    assert k >= 3
    decider = _with_schedule([[1, 3, k], [4, 64, 1]])
    alphas = decider.speedup_model.acceptance.alphas("code", 0.0)
    small = {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 2)}  # γ(3) = k
    large = {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 3)}  # γ(4) = 1
    f_small, d_small = decider.decide(decider.parse(code()), small)
    f_large, d_large = decider.decide(decider.parse(code()), large)
    assert f_small.expected_tokens == pytest.approx(expected_tokens(alphas))
    assert f_large.expected_tokens == pytest.approx(1 + alphas[0])
    assert d_large.speedup < d_small.speedup
    plain = _with_schedule(None)
    f_plain, _ = plain.decide(plain.parse(code()), large)
    assert f_plain.expected_tokens == pytest.approx(expected_tokens(alphas))
    rows = decider.speedup_model.curve("code", 0.0)  # the operators' S(B) says the same
    assert [r["expected_tokens"] for r in rows] == pytest.approx(
        [expected_tokens(alphas), 1 + alphas[0]], abs=1e-3)


def test_steps_that_drafted_fewer_than_k_do_not_count_against_the_positions_they_skipped():
    """With per-step drafts (metrics level "detailed") a step of γ = 2 accepting both says nothing
    of positions 3..k; read from the histogram alone it would count as rejecting position 3."""
    decider = _with_schedule([[1, 3, 4], [4, 64, 2]])
    features, _ = decider.decide(decider.parse(code()), LOADS)
    steps = 200
    decider.learn(features, {"metrics": {"speculative_decoding": {
        "acceptance_histogram": [0, 0, steps, 0, 0],
        "per_step_drafted": [2] * steps, "per_step_accepted": [2] * steps}}})
    alphas = decider.speedup_model.acceptance.alphas("code", 0.0)
    prior = decider.speedup_model.acceptance.priors["code"]
    assert alphas[0] > 0.9 and alphas[1] > 0.9
    assert alphas[2] == pytest.approx(prior) and alphas[3] == pytest.approx(prior)
    summary = _with_schedule([[1, 3, 4], [4, 64, 2]])
    summary.learn(features, {"metrics": {"speculative_decoding": {
        "acceptance_histogram": [0, 0, steps, 0, 0]}}})
    assert summary.speedup_model.acceptance.alphas("code", 0.0)[2] < 0.1


def test_a_table_with_speculation_off_leaves_undrafted_steps_out_of_acceptance():
    """A γ = 0 range decodes without drafts by the table's choice, priced at E[τ] = 1 there: the
    undrafted steps are not added to the histogram as rejections (they are without a table)."""
    decider = _with_schedule([[1, 3, 4], [4, 64, 0]])
    features, _ = decider.decide(decider.parse(code()), LOADS)
    decider.learn(features, {"usage": {"completion_tokens": 20}, "metrics": {
        "speculative_decoding": {"acceptance_histogram": [0, 0, 0, 1, 1],
                                 "per_step_drafted": [4, 4], "per_step_accepted": [3, 4]}}})
    assert decider.speedup_model.acceptance.observed_steps("code", 0.0) == 2
    large = {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 3)}
    f_large, _ = decider.decide(decider.parse(code()), large)
    assert f_large.expected_tokens == 1.0
