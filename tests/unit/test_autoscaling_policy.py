"""The autoscaling policy as a pure function (autoscaling/rules.py) and its Serve adapter on
scripted contexts: decision tables, missing metrics, budget caps, delays."""

from __future__ import annotations

import pytest

from autoscaling.controller import PoolAutoscaler, pool_view
from autoscaling.decision import PoolView
from autoscaling.rules import decide
from core import (DEFAULT_CONFIG_PATH, AutoscalingConfig, ConfigError, PoolScalingConfig,
                  SpecserveConfig)
from core.stats import MEMORY_BOUND_METRIC, WAITING_METRIC
from deployments.app import pool_deployment_config
from fakes.serve_autoscaling import FakeContext, FakeDeploymentId

CFG = AutoscalingConfig(enabled=True, budget_accelerators=6, upscale_delay_s=0,
                        downscale_delay_s=0, target_ongoing_requests=4, downscale_load_fraction=0.5,
                        vanilla=PoolScalingConfig(min_replicas=1, max_replicas=4),
                        speculative=PoolScalingConfig(min_replicas=1, max_replicas=4))


def view(n=1, ongoing=0.0, waiting=0.0, mem=0.5, target=None, tp=1) -> PoolView:
    return PoolView(replicas=n, target=n if target is None else target, ongoing=ongoing,
                    waiting=waiting, memory_bound=mem, tensor_parallel_size=tp)


@pytest.mark.parametrize("spec, van, want_spec, want_van", [
    # speculative memory-bound under demand grows; idle vanilla holds at its minimum
    (view(1, ongoing=5, mem=0.9), view(1), (2, "memory_bound_demand"), (1, "drained")),
    # demand well above target: grow to ceil(ongoing / target) at once
    (view(1, ongoing=11, mem=0.9), view(1), (3, "memory_bound_demand"), (1, "drained")),
    # speculative compute-bound under load: it holds, capacity goes to vanilla
    (view(2, ongoing=10, mem=0.1), view(1, ongoing=1), (2, "compute_bound"),
     (2, "shift_from_speculative")),
    # between the memory-bound thresholds: hysteresis, hold
    (view(2, ongoing=10, mem=0.45), view(1, ongoing=1), (2, "hysteresis"), (1, "steady")),
    # a queue building on vanilla grows vanilla
    (view(1, ongoing=1, mem=0.9), view(1, ongoing=3, waiting=3), (1, "steady"),
     (2, "queue_building")),
    # drained: every pool back to its minimum
    (view(3, ongoing=0), view(2, ongoing=0), (1, "drained"), (1, "drained")),
    # lightly loaded: shrink while the load over one replica fewer stays under half the target
    (view(3, ongoing=2, mem=0.9), view(2, ongoing=3), (1, "underloaded"), (2, "steady")),
])
def test_decision_table(spec, van, want_spec, want_van):
    decisions, _ = decide({"speculative": spec, "vanilla": van}, CFG, {}, now=0.0)
    assert (decisions["speculative"].replicas, decisions["speculative"].reason) == want_spec
    assert (decisions["vanilla"].replicas, decisions["vanilla"].reason) == want_van


def test_missing_metrics_hold_steady():
    spec = PoolView(replicas=2, target=2, ongoing=50, waiting=None, memory_bound=None)
    van = PoolView(replicas=1, target=1, ongoing=0, waiting=0, memory_bound=None)
    decisions, _ = decide({"speculative": spec, "vanilla": van}, CFG, {}, now=0.0)
    assert [(p, d.replicas, d.reason) for p, d in decisions.items()] == [
        ("speculative", 2, "metrics_missing"), ("vanilla", 1, "metrics_missing")]


def test_no_new_change_while_serve_moves_to_the_last_target():
    decisions, _ = decide({"vanilla": view(1, ongoing=40, target=2)}, CFG, {}, now=0.0)
    assert (decisions["vanilla"].replicas, decisions["vanilla"].reason) == (2, "scaling_in_progress")


def test_budget_caps_growth_in_accelerators():
    cfg = CFG.model_copy(update={"budget_accelerators": 12})
    # tp 4 per replica: 2 + 1 replicas fill 12 accelerators; vanilla cannot grow
    decisions, _ = decide({"speculative": view(2, ongoing=9, mem=0.9, tp=4),
                           "vanilla": view(1, ongoing=9, tp=4)}, cfg, {}, now=0.0)
    used = sum(d.replicas * 4 for d in decisions.values())
    assert used <= 12
    assert (decisions["vanilla"].replicas, decisions["vanilla"].reason) == (1, "budget_cap")


def test_budget_shifts_capacity_to_vanilla_when_queues_build():
    cfg = CFG.model_copy(update={"budget_accelerators": 4})
    decisions, _ = decide({"speculative": view(3, ongoing=13, mem=0.9),
                           "vanilla": view(1, ongoing=6, waiting=4)}, cfg, {}, now=0.0)
    assert (decisions["vanilla"].replicas, decisions["vanilla"].reason) == (2, "queue_building")
    assert (decisions["speculative"].replicas, decisions["speculative"].reason) == (2, "budget_shift")


def test_bounds_per_pool():
    decisions, _ = decide({"speculative": view(4, ongoing=100, mem=0.9)}, CFG, {}, now=0.0)
    assert decisions["speculative"].replicas == 4  # max_replicas


def test_delays_wait_then_apply_and_reset_on_reversal():
    cfg = CFG.model_copy(update={"upscale_delay_s": 2.0, "downscale_delay_s": 10.0})
    busy = {"vanilla": view(1, ongoing=9)}
    d, state = decide(busy, cfg, {}, now=100.0)
    assert (d["vanilla"].replicas, d["vanilla"].wanted, d["vanilla"].pending) == (1, 3, True)
    d, state = decide(busy, cfg, state, now=101.0)
    assert d["vanilla"].pending and d["vanilla"].action == "hold"
    d, state = decide(busy, cfg, state, now=102.0)
    assert (d["vanilla"].replicas, d["vanilla"].action) == (3, "up")
    idle = {"vanilla": view(3, ongoing=0)}
    d, state = decide(idle, cfg, state, now=103.0)
    assert d["vanilla"].pending
    d, state = decide({"vanilla": view(3, ongoing=9)}, cfg, state, now=108.0)  # load is back
    assert not d["vanilla"].pending and d["vanilla"].replicas == 3
    d, state = decide(idle, cfg, state, now=109.0)  # the downscale clock restarts here
    d, state = decide(idle, cfg, state, now=118.0)
    assert d["vanilla"].replicas == 3
    d, state = decide(idle, cfg, state, now=119.0)
    assert (d["vanilla"].replicas, d["vanilla"].action, d["vanilla"].reason) == (1, "down", "drained")


def test_config_refuses_budget_below_minimums():
    data = SpecserveConfig.from_yaml("cluster/default.yaml").model_dump(mode="json")
    data["autoscaling"]["budget_accelerators"] = 1
    with pytest.raises(ConfigError, match="autoscaling: budget_accelerators 1"):
        SpecserveConfig.from_dict(data)
    data["autoscaling"]["budget_accelerators"] = 3
    data["autoscaling"]["vanilla"] = {"min_replicas": 3, "max_replicas": 2}
    with pytest.raises(ConfigError, match="autoscaling.vanilla.min_replicas"):
        SpecserveConfig.from_dict(data)


def test_initial_replicas_start_a_pool_that_may_go_to_zero():
    data = SpecserveConfig.from_yaml("cluster/default.yaml").model_dump(mode="json")
    data["autoscaling"]["vanilla"] = {"min_replicas": 0, "max_replicas": 2, "initial_replicas": 1}
    data["autoscaling"]["speculative"] = {"min_replicas": 0, "max_replicas": 2}
    cfg = SpecserveConfig.from_dict(data)
    assert [cfg.initial_replicas(p) for p in cfg.pools()] == [1, 0]
    serve_cfg = pool_deployment_config(cfg, "vanilla", autoscale=True)["autoscaling_config"]
    assert (serve_cfg["min_replicas"], serve_cfg["initial_replicas"]) == (0, 1)
    data["autoscaling"]["vanilla"]["initial_replicas"] = 3
    with pytest.raises(ConfigError, match="autoscaling.vanilla.initial_replicas.*between "
                                          "min_replicas \\(0\\) and max_replicas \\(2\\)"):
        SpecserveConfig.from_dict(data)
    data["autoscaling"]["vanilla"] = {"min_replicas": 0, "max_replicas": 2, "initial_replicas": 2}
    data["autoscaling"]["speculative"]["initial_replicas"] = 1
    with pytest.raises(ConfigError, match="below the pools' initial_replicas"):
        SpecserveConfig.from_dict(data)


def test_default_config_enables_autoscaling_starting_one_replica_per_pool():
    cfg = SpecserveConfig.from_yaml("cluster/default.yaml")
    assert cfg.autoscaling.enabled
    assert [cfg.initial_replicas(p) for p in cfg.pools()] == [1, 1]


def test_serve_adapter_maps_contexts_and_counts_calls():
    cfg = CFG.model_copy(update={"upscale_delay_s": 1.0})
    policy = PoolAutoscaler(cfg.model_dump(mode="json"), {"vanilla": 1, "speculative": 1})
    metrics = {WAITING_METRIC: {"r0": 0.0}, MEMORY_BOUND_METRIC: {"r0": 0.9}}
    van, spec = FakeDeploymentId("vanilla"), FakeDeploymentId("speculative")
    out, state = policy({van: FakeContext(1, 0, metrics), spec: FakeContext(1, 6, metrics)})
    assert out == {van: 1, spec: 1} and state[spec]["specserve"]["direction"] == "up"
    later = [FakeContext(1, 0, metrics, state=state[van]),
             FakeContext(1, 6, metrics, state=state[spec])]
    for ctx in later:
        ctx.current_time = 51.0
    out, _ = policy({van: later[0], spec: later[1]})
    assert out[spec] == 2 and policy.calls == 2


def test_adapter_sees_missing_metrics_of_a_running_replica():
    ctx = FakeContext(2, 3, {WAITING_METRIC: {"r0": 1.0},
                             MEMORY_BOUND_METRIC: {"r0": 0.5, "r1": 0.7}})
    v = pool_view(ctx, 1)
    assert v.waiting is None and v.memory_bound == pytest.approx(0.6)


def test_serve_config_carries_the_application_policy():
    from ray.serve.config import AutoscalingPolicy
    from ray.serve.schema import ServeDeploySchema

    from deployments.deploy import app_config

    cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    schema = ServeDeploySchema(applications=[app_config(cfg, "specserve")])
    policy = AutoscalingPolicy(**schema.applications[0].autoscaling_policy)
    instance = policy.get_policy()(**policy.policy_kwargs)  # what Serve's controller does
    assert isinstance(instance, PoolAutoscaler)


def test_a_pool_at_zero_starts_at_once_when_a_request_waits_and_goes_back_when_idle():
    cfg = CFG.model_copy(update={"upscale_delay_s": 30.0, "downscale_delay_s": 10.0,
                                 "speculative": PoolScalingConfig(min_replicas=0, max_replicas=2)})
    asleep = PoolView(replicas=0, target=0, ongoing=0, waiting=None, memory_bound=None)
    d, state = decide({"speculative": asleep, "vanilla": view(1)}, cfg, {}, now=0.0)
    assert (d["speculative"].replicas, d["speculative"].reason) == (0, "steady")
    # one request queued at its handle (router/wake.py `PoolWaker.wake`): no upscale delay from zero
    woken = PoolView(replicas=0, target=0, ongoing=1, waiting=None, memory_bound=None)
    d, state = decide({"speculative": woken, "vanilla": view(1)}, cfg, state, now=1.0)
    assert (d["speculative"].replicas, d["speculative"].reason, d["speculative"].pending) == (
        1, "demand", False)
    # idle again: back to zero after the downscale delay
    d, state = decide({"speculative": view(1, ongoing=0), "vanilla": view(1)}, cfg, state, now=2.0)
    assert d["speculative"].pending
    d, state = decide({"speculative": view(1, ongoing=0), "vanilla": view(1)}, cfg, state, now=12.0)
    assert (d["speculative"].replicas, d["speculative"].reason) == (0, "drained")


def test_a_pool_serving_short_requests_is_not_drained():
    # Serve's sampled in-flight count reads 0 between short requests; the engine's output says
    # the pool works (PoolServer.record_autoscaling_stats `busy`)
    cfg = CFG.model_copy(update={"vanilla": PoolScalingConfig(min_replicas=0, max_replicas=2)})
    working = PoolView(replicas=1, target=1, ongoing=0.0, waiting=0.0, memory_bound=0.5, busy=0.4)
    d, _ = decide({"vanilla": working}, cfg, {}, now=0.0)
    assert (d["vanilla"].wanted, d["vanilla"].reason) == (1, "steady")
    idle = PoolView(replicas=1, target=1, ongoing=0.0, waiting=0.0, memory_bound=0.5, busy=0.0)
    d, _ = decide({"vanilla": idle}, cfg, {}, now=0.0)
    assert (d["vanilla"].wanted, d["vanilla"].reason) == (0, "drained")


def test_the_log_prints_changes_and_pending_ones_not_a_hold_whose_reason_flips(caplog):
    from autoscaling.decision import ScalingDecision
    policy = PoolAutoscaler(CFG.model_dump(mode="json"), {"vanilla": 1, "speculative": 1})
    views = {"vanilla": view(1)}
    caplog.set_level("DEBUG", logger="ray.serve")

    def record(d):
        caplog.clear()
        policy._record({"vanilla": d}, views, {})
        return [(r.levelname, r.getMessage().split(" (")[0]) for r in caplog.records]

    assert record(ScalingDecision(1, 1, "drained", 1)) == [
        ("DEBUG", "specserve autoscaling: vanilla hold 1 -> 1")]
    assert record(ScalingDecision(1, 1, "steady", 1)) == [
        ("DEBUG", "specserve autoscaling: vanilla hold 1 -> 1")]
    assert record(ScalingDecision(1, 2, "demand", 1, pending=True)) == [
        ("INFO", "specserve autoscaling: vanilla hold 1 -> 1")]
    assert record(ScalingDecision(2, 2, "demand", 1)) == [
        ("INFO", "specserve autoscaling: vanilla up 1 -> 2")]
    assert record(ScalingDecision(2, 2, "demand", 1)) == []  # the same decision again
    assert [e["reason"] for e in policy._events] == ["drained", "steady", "demand", "demand"]
