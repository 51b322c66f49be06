"""`choose_route` as a decision table."""

import pytest

from core import RouterConfig, batched_speedup
from router.policy import PoolLoad, RequestFeatures, Unroutable, choose_route

IDLE = {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 0)}
CFG = RouterConfig(max_speculative_in_flight=8, max_speculative_temperature=0.7)


@pytest.mark.parametrize("req, pools, route, reason", [
    (RequestFeatures("code", 0.0), IDLE, "speculative", "task_gains"),
    (RequestFeatures("math", 0.5), IDLE, "speculative", "task_gains"),
    (RequestFeatures("chat", 0.0), IDLE, "vanilla", "task_gains_little"),
    (RequestFeatures("creative", 0.0), IDLE, "vanilla", "task_gains_little"),
    (RequestFeatures("code", 1.0), IDLE, "vanilla", "high_temperature"),
    (RequestFeatures("code", 0.0, unsupported_options=("min_p",)), IDLE, "vanilla",
     "unsupported_option"),
    (RequestFeatures("code", 0.0, beyond_speculator_context=True), IDLE, "vanilla",
     "beyond_speculator_context"),
    (RequestFeatures("code", 0.0, no_decode_step=True), IDLE, "vanilla", "no_decode_step"),
    (RequestFeatures("code", 0.0), {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 8)},
     "vanilla", "batch_pressure"),
    (RequestFeatures("code", 0.0), {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(2, 8)},
     "speculative", "task_gains"),
    (RequestFeatures("chat", 1.5, requested_route="speculative"), IDLE, "speculative",
     "requested"),
    (RequestFeatures("code", 0.0, requested_route="vanilla"), IDLE, "vanilla", "requested"),
    (RequestFeatures("chat", 0.0), {"speculative": PoolLoad(1, 0)}, "speculative", "only_pool"),
])
def test_decision_table(req, pools, route, reason):
    d = choose_route(req, pools, CFG)
    assert (d.route, d.reason) == (route, reason)


def test_by_default_no_temperature_is_capped_the_speedup_decides():
    cfg = RouterConfig()
    assert cfg.max_speculative_temperature == 2.0  # the OpenAI maximum: the cap is off
    for s, route, reason in ((1.4, "speculative", "speculation_pays"),
                             (0.9, "vanilla", "speculation_costs")):
        d = choose_route(RequestFeatures("creative", 2.0), IDLE, cfg, speedup=s)
        assert (d.route, d.reason) == (route, reason)
    capped = RouterConfig(max_speculative_temperature=0.7)
    d = choose_route(RequestFeatures("creative", 1.0), IDLE, capped, speedup=1.4)
    assert (d.route, d.reason) == ("vanilla", "high_temperature")


def test_pin_overrides_auto_but_not_the_request():
    pinned = RouterConfig(pin="vanilla")
    assert choose_route(RequestFeatures("code", 0.0), IDLE, pinned).reason == "pinned"
    assert choose_route(RequestFeatures("code", 0.0, requested_route="speculative"), IDLE,
                        pinned).route == "speculative"


def test_forcing_a_pool_that_is_not_configured_is_an_error():
    with pytest.raises(ValueError, match="route"):
        choose_route(RequestFeatures("code", 0.0, requested_route="speculative"),
                     {"vanilla": PoolLoad(1, 0)}, CFG)


def _measured(e_tau, spec_step, van_step):
    """A request, idle pools, and S from measured step times (core.specdecode.batched_speedup)."""
    return (RequestFeatures("chat", 0.0, expected_tokens=e_tau), IDLE,
            batched_speedup(e_tau, van_step, spec_step))


def test_measured_speedup_decides_once_step_times_are_known():
    req, pools, s = _measured(3.0, 0.013, 0.010)  # S = 3 * 10 / 13 = 2.3
    d = choose_route(req, pools, CFG, speedup=s)
    assert (d.route, d.reason) == ("speculative", "speculation_pays")
    assert d.speedup == pytest.approx(3.0 * 0.010 / 0.013)
    req, pools, s = _measured(3.0, 0.050, 0.010)  # compute-bound verification: S = 0.6
    d = choose_route(req, pools, CFG, speedup=s)
    assert (d.route, d.reason) == ("vanilla", "speculation_costs")
    assert d.speedup == pytest.approx(0.6)


def test_hysteresis_keeps_a_speculative_task_until_clearly_below_threshold():
    req, pools, s = _measured(1.08, 0.010, 0.010)  # S = 1.08: between 1.05 and 1.10
    assert choose_route(req, pools, CFG, previous="vanilla", speedup=s).route == "vanilla"
    assert choose_route(req, pools, CFG, previous="speculative", speedup=s).route == "speculative"
    req, pools, s = _measured(1.02, 0.010, 0.010)
    assert choose_route(req, pools, CFG, previous="speculative", speedup=s).route == "vanilla"


MIN_P = RequestFeatures("code", 0.0, unsupported_options=("min_p",))


@pytest.mark.parametrize("pools, cfg, expected", [
    (IDLE, RouterConfig(pin="speculative"), ("vanilla", "unsupported_option")),  # runtime pin
    ({"vanilla": PoolLoad(1, 0, available=False), "speculative": PoolLoad(1, 0)}, CFG,
     ("vanilla", "unsupported_option")),  # vanilla down: no fallback to speculative
    ({"vanilla": PoolLoad(0, 0, available=False, asleep=True), "speculative": PoolLoad(1, 0)},
     CFG, ("vanilla", "unsupported_option")),  # vanilla scaled to zero: the caller waits for it
])
def test_an_option_the_speculative_path_refuses_never_leaves_vanilla(pools, cfg, expected):
    d = choose_route(MIN_P, pools, cfg)
    assert (d.route, d.reason) == expected
    assert d.eligible == ("vanilla",) and not d.may_run_on("speculative")


@pytest.mark.parametrize("req, pools, param, message", [
    (RequestFeatures("code", 0.0, requested_route="speculative", unsupported_options=(
        "logit_bias",)), IDLE, "logit_bias", "logit_bias: not supported on the speculative pool"),
    (MIN_P, {"speculative": PoolLoad(1, 0)}, "min_p", "min_p: needs the vanilla pool"),
    (RequestFeatures("code", 0.0, requested_route="speculative"), {"vanilla": PoolLoad(1, 0)},
     "route", "route: pool 'speculative' is not configured"),
])
def test_no_pool_may_take_it_is_unroutable_naming_the_param(req, pools, param, message):
    with pytest.raises(Unroutable) as e:
        choose_route(req, pools, CFG)
    assert e.value.param == param and str(e.value).startswith(message)


@pytest.mark.parametrize("req, pools, expected", [
    # it wanted the pool scaled to zero: the other pool takes it, with the reason
    (RequestFeatures("code", 0.0), {"vanilla": PoolLoad(1, 0),
                                    "speculative": PoolLoad(0, 0, available=False, asleep=True)},
     ("vanilla", "pool_scaled_to_zero")),
    (RequestFeatures("code", 0.0, requested_route="speculative"),
     {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(0, 0, available=False, asleep=True)},
     ("vanilla", "pool_scaled_to_zero")),
    # it wanted the pool that is up: the sleeping one is not involved
    (RequestFeatures("chat", 0.0), {"vanilla": PoolLoad(1, 0),
                                    "speculative": PoolLoad(0, 0, available=False, asleep=True)},
     ("vanilla", "task_gains_little")),
    # both asleep: it keeps the pool it wants (the ingress wakes it and waits)
    (RequestFeatures("code", 0.0), {"vanilla": PoolLoad(0, 0, available=False, asleep=True),
                                    "speculative": PoolLoad(0, 0, available=False, asleep=True)},
     ("speculative", "task_gains")),
])
def test_a_pool_scaled_to_zero(req, pools, expected):
    d = choose_route(req, pools, CFG)
    assert (d.route, d.reason) == expected


LOSSY = {"vanilla": PoolLoad(1, 0), "speculative": PoolLoad(1, 0, lossless_sampling=False)}


@pytest.mark.parametrize("req, cfg, route, reason", [
    (RequestFeatures("code", 0.5), CFG, "vanilla", "speculation_lossy"),
    (RequestFeatures("code", 0.5), RouterConfig(pin="speculative"), "vanilla",
     "speculation_lossy"),
    (RequestFeatures("code", 0.0), CFG, "speculative", "task_gains"),  # greedy is exact
    (RequestFeatures("code", 0.0, requested_route="speculative"), CFG, "speculative",
     "requested"),
    (RequestFeatures("code", 0.5, requested_route="vanilla"), CFG, "vanilla", "requested"),
])
def test_sampled_requests_stay_off_a_lossy_speculative_pool(req, cfg, route, reason):
    d = choose_route(req, LOSSY, cfg)
    assert (d.route, d.reason) == (route, reason)


def test_forcing_a_lossy_speculative_pool_at_temperature_is_refused():
    with pytest.raises(Unroutable, match="temperature") as e:
        choose_route(RequestFeatures("code", 0.7, requested_route="speculative"), LOSSY, CFG)
    assert e.value.param == "temperature"
