"""Pools that slow each other (one host): the measured slowdown ρ (core/step_time.py
`HostSharing`), the load allocation it feeds (router/policy.py `allocate`, `LoadMix`) and the
decider's `host_shared` moves (router/decider.py)."""

from __future__ import annotations

import pytest
from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest

from core import DEFAULT_CONFIG_PATH, PoolStats, SpecserveConfig
from core.stats import EngineStats
from core.step_time import HostSharing
from router.decider import RouteDecider
from router.policy import LoadMix, PoolLoad, SpeedupModel, allocate

# Memory-bound step times (seconds per step by requests in the engine): one more sequence costs
# little. A speculative step costs twice a vanilla one, so code (α 0.7) pays and chat (α 0.5)
# does not, per request.
VANILLA = {1: 0.010, 16: 0.012}
SPECULATIVE = {1: 0.020, 16: 0.026}


def test_slowdown_is_unknown_until_a_batch_is_sampled_both_ways():
    sharing = HostSharing()
    sharing.observe("vanilla", 4, 0.010, other_busy=False)
    sharing.observe("vanilla", 16, 0.030, other_busy=True)  # another bucket: nothing to compare
    assert sharing.slowdown("vanilla") is None and sharing.slowdowns() == {}
    sharing.observe("vanilla", 4, 0.020, other_busy=True)
    assert sharing.slowdown("vanilla") == pytest.approx(2.0)
    sharing.observe("vanilla", 16, 0.010, other_busy=False)  # 3x at 16, 2x at 4: geometric mean
    assert sharing.slowdown("vanilla") == pytest.approx(6 ** 0.5)
    assert sharing.slowdown("speculative") is None


def _snapshot(sample_id: int, v_step: float, spec_running: int) -> dict[str, PoolStats]:
    """A board view: the vanilla replica's sample `sample_id` (batch 4, `v_step` seconds) while
    the speculative pool's engine runs `spec_running` requests."""
    return {"vanilla": PoolStats(replicas=1, step_samples=[("v0", sample_id, 4.0, v_step)]),
            "speculative": PoolStats(replicas=1, engine=EngineStats(
                num_requests_running=spec_running))}


def test_samples_are_filed_by_whether_the_other_pools_engines_had_requests():
    model = SpeedupModel(4)

    model.update_pools(_snapshot(1, 0.010, spec_running=0))
    model.update_pools(_snapshot(1, 0.050, spec_running=3))  # the same sample again: not refiled
    assert model.host_sharing.slowdown("vanilla") is None
    model.update_pools(_snapshot(2, 0.015, spec_running=3))
    assert model.host_sharing.slowdown("vanilla") == pytest.approx(1.5)


def test_load_mix_weights_requests_by_tokens():
    mix = LoadMix(weight=1.0)  # the newest request only
    mix.observe(100, 2.5, speculative=True)
    assert (mix.speculative_share, mix.expected_tokens) == (1.0, 2.5)
    mix = LoadMix(weight=0.5)
    mix.observe(100, 4.0, speculative=True)  # 25 steps
    mix.observe(200, 1.0, speculative=False)  # 200 steps; the first request's sums halve
    assert mix.speculative_share == pytest.approx(50 / 250)
    assert mix.expected_tokens == pytest.approx(250 / 212.5)  # tokens / steps
    assert mix.speculative_expected_tokens == pytest.approx(4.0)


def _learn(sharing: HostSharing, rho: float) -> None:
    """Both pools measured at batch 4 alone and `rho` times slower beside the other."""
    for pool, steps in (("vanilla", VANILLA), ("speculative", SPECULATIVE)):
        sharing.observe(pool, 4, steps[1], other_busy=False)
        sharing.observe(pool, 4, steps[1] * rho, other_busy=True)


def _model(rho: float | None) -> SpeedupModel:
    model = SpeedupModel(4)
    model.update_pools({"vanilla": PoolStats(profile=VANILLA),
                        "speculative": PoolStats(profile=SPECULATIVE)})
    if rho is not None:
        _learn(model.host_sharing, rho)
    return model


def _half_and_half() -> LoadMix:
    mix = LoadMix()
    for _ in range(20):
        mix.observe(100, 2.5, speculative=True)
        mix.observe(100, 1.9, speculative=False)
    return mix


LOADED = {"vanilla": PoolLoad(1, 4), "speculative": PoolLoad(1, 4)}


def test_the_load_stays_split_until_the_slowdown_is_measured():
    assert allocate(_model(None), _half_and_half(), LOADED) == ("split", {})
    assert allocate(_model(2.0), LoadMix(), LOADED) == ("split", {})  # no traffic seen yet


def test_separate_accelerators_keep_the_split_and_a_shared_host_takes_one_pool():
    mix = _half_and_half()
    allocation, rates = allocate(_model(1.0), mix, LOADED)
    assert allocation == "split" and rates["split"] > max(rates["vanilla"], rates["speculative"])
    allocation, rates = allocate(_model(2.0), mix, LOADED)
    assert allocation != "split" and rates[allocation] == max(rates.values())
    assert rates["split"] < 0.6 * rates[allocation]  # both engines at half speed


def test_the_allocation_in_force_holds_within_the_margin():
    mix = _half_and_half()
    _, rates = allocate(_model(1.0), mix, LOADED)
    other = min(("vanilla", "speculative"), key=rates.get)
    # the current allocation predicts less than the best, but by less than a margin of 100%
    assert allocate(_model(1.0), mix, LOADED, current=other, margin=1.0)[0] == other
    assert allocate(_model(1.0), mix, LOADED, current=other, margin=0.0)[0] == "split"


def _config(allocate_load: bool) -> SpecserveConfig:
    cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    return cfg.model_copy(update={"router": cfg.router.model_copy(
        update={"allocate_load": allocate_load})})


@pytest.fixture
def decider() -> RouteDecider:
    """A decider with `router.allocate_load` on (off by default) and both pools profiled."""
    decider = RouteDecider(_config(True), ["vanilla", "speculative"])
    decider.speedup_model.update_pools({"vanilla": PoolStats(profile=VANILLA),
                                        "speculative": PoolStats(profile=SPECULATIVE)})
    return decider


def _code() -> CompletionRequest:
    return CompletionRequest(model="m", prompt="def f(x):\n    return", temperature=0,
                             max_tokens=64)


def _chat(**kw) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", temperature=0, max_tokens=64, messages=[
        {"role": "user", "content": "Hi! How are you today? Tell me about your weekend."}], **kw)


def _routes(decider: RouteDecider, rounds: int = 10) -> list[tuple[str, str, str]]:
    out = []
    for _ in range(rounds):
        for body in (_code(), _chat()):
            request = decider.parse(body)
            decision = decider.decide(request, LOADED)[1]
            out.append((request.features.task, decision.route, decision.reason))
    return out


def _learn_rho(decider: RouteDecider, rho: float) -> None:
    _learn(decider.speedup_model.host_sharing, rho)


def test_per_request_routing_stands_while_the_pools_do_not_slow_each_other(decider):
    _learn_rho(decider, 1.0)
    routes = _routes(decider)
    assert decider.allocation == "split"
    assert {task: route for task, route, _ in routes} == {"code": "speculative",
                                                          "chat": "vanilla"}


def test_on_a_shared_host_the_load_goes_to_one_pool_and_says_why(decider):
    routes = _routes(decider, rounds=1)  # ρ not measured yet: per request
    assert {task: route for task, route, _ in routes} == {"code": "speculative",
                                                          "chat": "vanilla"}
    _learn_rho(decider, 2.0)
    routes = _routes(decider)[-4:]
    pool = decider.allocation
    assert pool in ("vanilla", "speculative") and {r for _, r, _ in routes} == {pool}
    moved = [task for task, _, reason in routes if reason == "host_shared"]
    assert moved == [("chat" if pool == "speculative" else "code")] * 2
    # what a request sets keeps its pool: an option only vanilla serves, a forced route
    if pool == "speculative":
        _, d = decider.decide(decider.parse(_chat(min_p=0.1)), LOADED)
        assert (d.route, d.reason) == ("vanilla", "unsupported_option")
    other = "vanilla" if pool == "speculative" else "speculative"
    _, d = decider.decide(decider.parse(_chat(route=other)), LOADED)
    assert (d.route, d.reason) == (other, "requested")


def test_a_sample_taken_beside_a_busy_pool_enters_the_step_time_divided_by_its_slowdown():
    model = SpeedupModel(4)

    model.update_pools(_snapshot(1, 0.010, spec_running=0))
    model.update_pools(_snapshot(2, 0.020, spec_running=2))  # ρ = 2 from this very sample
    assert model.host_sharing.slowdown("vanilla") == pytest.approx(2.0)
    assert model.step_time("vanilla", 4) == pytest.approx(0.010)  # the pool's step alone
    # GET /admin/step_samples: each sample as measured and as folded, newest last
    first, second = model.recent_samples()
    assert (first["step_ms"], first["other_busy"], first["slowdown"], first["folded_ms"]) == \
        (10.0, False, None, 10.0)
    assert (second["step_ms"], second["other_busy"], second["slowdown"], second["folded_ms"]) \
        == (20.0, True, 2.0, 10.0)
    assert (second["pool"], second["replica"], second["batch"]) == ("vanilla", "v0", 4.0)
    assert model.recent_samples(since=second["time"]) == []
    assert model.recent_samples(since=first["time"] - 1) == [first, second]


def test_the_load_moves_to_the_other_pool_at_most_once_per_hold(decider):
    from router.decider import ALLOCATION_HOLD_S
    now = [0.0]
    decider.clock = lambda: now[0]
    _learn_rho(decider, 2.0)
    _routes(decider, rounds=2)
    first = decider.allocation
    other = "vanilla" if first == "speculative" else "speculative"
    assert first != "split"
    # the other pool's steps turn out 4x faster: the load would move there at once
    decider.speedup_model.step_times[other].load_profile({})
    for _ in range(30):
        decider.speedup_model.step_times[other].observe(4, (VANILLA if other == "vanilla"
                                                            else SPECULATIVE)[1] / 4)
    _routes(decider, rounds=2)
    assert decider.allocation == first  # within the hold
    now[0] += ALLOCATION_HOLD_S
    _routes(decider, rounds=2)
    assert decider.allocation == other


def test_the_slowdown_is_read_at_the_batch_when_that_batch_was_sampled_both_ways():
    sharing = HostSharing()
    for batch, rho in ((2, 2.0), (64, 1.2)):
        sharing.observe("vanilla", batch, 0.01 * batch, other_busy=False)
        sharing.observe("vanilla", batch, 0.01 * batch * rho, other_busy=True)
    assert sharing.slowdown("vanilla", 2) == pytest.approx(2.0)
    assert sharing.slowdown("vanilla", 64) == pytest.approx(1.2)
    assert sharing.slowdown("vanilla", 8) == pytest.approx((2.0 * 1.2) ** 0.5)  # not sampled


def test_allocate_load_off_keeps_the_per_request_rule():
    decider = RouteDecider(SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH),  # the default: off
                           ["vanilla", "speculative"])
    decider.speedup_model.update_pools({"vanilla": PoolStats(profile=VANILLA),
                                        "speculative": PoolStats(profile=SPECULATIVE)})
    _learn_rho(decider, 2.0)
    routes = _routes(decider)
    assert decider.allocation == "split" and all(r != "host_shared" for _, _, r in routes)
    assert {task: route for task, route, _ in routes} == {"code": "speculative",
                                                          "chat": "vanilla"}
    assert decider.speedup_model.alone_steps is False  # samples as measured, as before ρ
