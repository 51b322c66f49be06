"""Routing in throughput mode, as a batch job routes its rows (`RouteDecider(...,
pricing="throughput")`, router/policy.py): the online policy fed with marginal step times, under
the batch pressure a job creates."""

from __future__ import annotations

import asyncio
import math

import pytest
from ray.serve.llm.openai_api_models import CompletionRequest

from core import DEFAULT_CONFIG_PATH, PoolStats, SpecserveConfig
from router.decider import RouteDecider
from router.policy import marginal_step_s

# Step seconds per running batch, shaped like DESIGN.md §3's 70 M-param CPU measurements: the
# vanilla pool saturates near batch 64 (1139 → 1133 tok/s); a speculative step costs more and
# grows faster with the batch.
VANILLA = {1: 1 / 37.5, 16: 16 / 415, 64: 64 / 1139, 128: 128 / 1133}
SPECULATIVE = {1: 0.035, 16: 0.060, 64: 0.120, 128: 0.280}
CODE = "def parse(line: str) -> dict:\n    "
CHAT = "Hi! How are you today?"


def test_marginal_step_time_is_unknown_without_points():
    assert marginal_step_s({}, 0, 1, 128) is None


def test_an_idle_pool_offers_its_batch_1_step_time():
    assert marginal_step_s({1: 0.02}, 0, 1, 128) == pytest.approx(0.02)
    assert marginal_step_s(VANILLA, 0, 1, 128) == pytest.approx(1 / 37.5)


def test_marginal_step_time_grows_with_the_batch_and_saturates():
    steps = [marginal_step_s(VANILLA, n, 1, 128) for n in (0, 8, 32, 80)]
    assert steps[0] < steps[1] < steps[2] and steps[3] == math.inf  # 1139 → 1133 tok/s: no gain


def test_noise_cannot_make_a_gain_negative_inside_the_measured_range():
    noisy = {1: 0.020, 2: 0.0097, 4: 0.019, 8: 0.016, 16: 0.035}  # a busy machine's profile
    steps = [marginal_step_s(noisy, n, 1, 128) for n in range(8)]
    assert all(0 < s < math.inf for s in steps) and steps == sorted(steps)


def test_queued_sequences_add_nothing_and_replicas_add_capacity():
    assert marginal_step_s(VANILLA, 4, 1, max_num_seqs=4) == math.inf
    assert marginal_step_s(VANILLA, 4, 2, max_num_seqs=4) < math.inf
    assert marginal_step_s(VANILLA, 15, 2, 128) == pytest.approx(
        marginal_step_s(VANILLA, 7, 1, 128), rel=0.2)


def router(max_num_seqs: int = 128) -> RouteDecider:
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    for pool in ("vanilla", "speculative"):
        data[pool]["max_num_seqs"] = max_num_seqs
    r = RouteDecider(SpecserveConfig.from_dict(data), ["speculative", "vanilla"], generation=None,
                     replica_id="test", pricing="throughput")  # as cluster/batch/job.py builds it
    r.speedup_model.update_pools({"vanilla": PoolStats(replicas=1, profile=VANILLA),
                              "speculative": PoolStats(replicas=1, profile=SPECULATIVE)})
    # measured acceptance: code accepts most drafts (α ≈ 0.85), chat few (α ≈ 0.2)
    # (histogram[j]: verification steps that accepted exactly j of the γ = 4 drafts)
    r.speedup_model.acceptance.observe("code", 0.0, [100, 100, 100, 200, 1500])
    r.speedup_model.acceptance.observe("chat", 0.0, [4000, 800, 150, 40, 10])
    return r


def dispatch(r: RouteDecider, prompt: str, rows: int) -> list:
    """Routes `rows` requests that all stay in flight (a batch job's window filling up), as
    cluster/batch/run.py routes its rows."""
    async def route_all() -> list:
        decisions = []
        for _ in range(rows):
            body = CompletionRequest(model="specserve-tiny", prompt=prompt, temperature=0)
            d = (await r.route(r.parse(body), admission=False)).decision
            r.pressure.start(d.route)
            decisions.append(d)
        return decisions

    return asyncio.run(route_all())


def test_rows_that_gain_keep_the_speculative_path_under_batch_pressure():
    decisions = dispatch(router(), CODE, 96)
    routes = [d.route for d in decisions]
    assert routes[0] == "speculative" and decisions[0].reason == "speculation_pays"
    # the window spills to vanilla as the speculative pool's marginal gain falls, and back
    assert 16 <= routes.count("speculative") <= 80 and routes.count("vanilla") >= 16
    assert all(d.reason in ("speculation_pays", "speculation_costs") for d in decisions)


def spec_share(decisions) -> float:
    return sum(d.route == "speculative" for d in decisions) / len(decisions)


def test_rows_that_gain_little_take_the_speculative_pool_only_as_spare_capacity():
    chat = dispatch(router(), CHAT, 64)
    assert (chat[0].route, chat[0].reason) == ("vanilla", "speculation_costs")
    assert spec_share(chat) < spec_share(dispatch(router(), CODE, 64))


def test_in_a_mixed_file_the_speculative_path_goes_to_the_rows_that_gain_most():
    r = router()
    code, chat = [], []
    for _ in range(48):  # rows alternate and all stay in flight
        code += dispatch(r, CODE, 1)
        chat += dispatch(r, CHAT, 1)
    assert spec_share(code) > 0.9 and spec_share(chat) < 0.1


def test_both_pools_saturated_falls_back_to_online_step_times():
    r = router(max_num_seqs=4)
    for route in ("vanilla", "speculative") * 4:
        r.pressure.start(route)
    loads = r.loads()
    assert loads["vanilla"].in_flight == loads["speculative"].in_flight == 4
    step_s = r.speedup_model.pool_step_s(loads)
    assert step_s["vanilla"] == pytest.approx(r.speedup_model.step_time("vanilla", 5))
    assert step_s["speculative"] == pytest.approx(r.speedup_model.step_time("speculative", 5))


def test_finished_rows_free_their_pool():
    r = router()
    dispatch(r, CODE, 3)
    assert sum(r.pressure.local_in_flight_all().values()) == 3
    for route, n in r.pressure.local_in_flight_all().items():
        for _ in range(n):
            r.pressure.finish(route)
    assert r.pressure.local_in_flight_all() == {"speculative": 0, "vanilla": 0}
