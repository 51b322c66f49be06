"""Admission control, pool health and the `pool_unavailable` fallback as decision tables; a
request waiting on a pool that goes (`await_unless_gone`)."""

from __future__ import annotations

import asyncio

import pytest

from core import STALE_AFTER_S, PoolStats, RouterConfig
from router.policy import (PoolLoad, RequestFeatures, RouteDecision, admit, choose_route,
                           refusal)
from router.decider import PoolHealth
from router.streaming import PoolLost, await_unless_gone

CAP = 4


def _pools(spec_in_flight=0, van_in_flight=0, spec_up=True, van_up=True, spec_replicas=1):
    return {"speculative": PoolLoad(spec_replicas, spec_in_flight, available=spec_up),
            "vanilla": PoolLoad(1, van_in_flight, available=van_up)}


@pytest.mark.parametrize("decision, pools, expected", [
    (RouteDecision("speculative", "task_gains"), _pools(3),
     RouteDecision("speculative", "task_gains")),
    (RouteDecision("speculative", "task_gains"), _pools(4),
     RouteDecision("vanilla", "pool_saturated")),
    (RouteDecision("speculative", "task_gains"), _pools(4, spec_replicas=2),
     RouteDecision("speculative", "task_gains")),             # the bound scales with live replicas
    (RouteDecision("speculative", "task_gains"), _pools(4, 4), None),
    (RouteDecision("speculative", "requested"), _pools(4), None),  # a forced pool does not overflow
    (RouteDecision("vanilla", "speculation_costs"), _pools(0, 4, spec_up=False), None),
])
def test_admit(decision, pools, expected):
    assert admit(decision, pools, CAP) == expected


@pytest.mark.parametrize("sequences, pools, expected", [
    (4, _pools(0), RouteDecision("speculative", "task_gains")),    # 4 of 4 fits an empty pool
    (2, _pools(2), RouteDecision("speculative", "task_gains")),
    (3, _pools(2), RouteDecision("vanilla", "pool_saturated")),    # 2 + 3 > 4: the other pool
    (3, _pools(2, 2), None),                                  # room for 2 anywhere, not 3
    (5, _pools(0, 0), None),                                  # above any pool's bound
    (6, _pools(2, spec_replicas=2), RouteDecision("speculative", "task_gains")),  # 2 + 6 <= 4 x 2
])
def test_admit_counts_sequences(sequences, pools, expected):
    assert admit(RouteDecision("speculative", "task_gains"), pools, CAP, sequences) == expected


@pytest.mark.parametrize("req, pools, expected", [
    (RequestFeatures("code", 0.0), _pools(spec_up=False), ("vanilla", "pool_unavailable")),
    (RequestFeatures("chat", 0.0), _pools(van_up=False), ("speculative", "pool_unavailable")),
    (RequestFeatures("code", 0.0, requested_route="speculative"), _pools(spec_up=False),
     ("vanilla", "pool_unavailable")),
    (RequestFeatures("code", 0.0, requested_route="vanilla"), _pools(spec_up=False),
     ("vanilla", "requested")),
    (RequestFeatures("code", 0.0), _pools(), ("speculative", "task_gains")),
])
def test_choose_route_avoids_an_unavailable_pool(req, pools, expected):
    d = choose_route(req, pools, RouterConfig())
    assert (d.route, d.reason) == expected


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_pool_health_after_a_failure_and_a_restart():
    clock = _Clock()
    health = PoolHealth(hold_s=5.0, clock=clock)
    assert health.available("speculative")              # nothing known yet: assume up
    health.observe({"speculative": PoolStats(replicas=1), "vanilla": PoolStats(replicas=1)})
    health.failed("speculative")
    assert not health.available("speculative") and health.available("vanilla")
    clock.t += 5.0
    health.observe({"vanilla": PoolStats(replicas=1)})  # the dead replica left the board
    assert not health.available("speculative")          # seen before, no replica now
    health.observe({"speculative": PoolStats(replicas=1), "vanilla": PoolStats(replicas=1)})
    assert health.available("speculative")              # its replacement reports


def test_a_pool_is_gone_only_when_its_last_replica_left_the_board():
    health = PoolHealth(hold_s=5.0, clock=_Clock())
    assert not health.gone("speculative")               # never listed: not gone
    health.observe({"speculative": PoolStats(replicas=2), "vanilla": PoolStats(replicas=1)})
    health.failed("speculative")                        # one replica failed a request
    assert not health.gone("speculative") and not health.available("speculative")
    health.observe({"speculative": PoolStats(replicas=1), "vanilla": PoolStats(replicas=1)})
    assert not health.gone("speculative")               # the other replica still serves
    health.observe({"vanilla": PoolStats(replicas=1)})
    assert health.gone("speculative") and not health.gone("vanilla")


def _gone_after(health: PoolHealth, delay_s: float):
    async def _later():
        await asyncio.sleep(delay_s)
        health.observe({"vanilla": PoolStats(replicas=1)})
    return asyncio.ensure_future(_later())


def test_a_request_waiting_on_a_pool_that_goes_is_cancelled_with_pool_lost():
    async def run():
        health = PoolHealth()
        health.observe({"speculative": PoolStats(replicas=1), "vanilla": PoolStats(replicas=1)})
        cancelled = []

        async def queued_in_the_handle():  # Serve holds it until a replica starts
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        _gone_after(health, 0.05)
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(PoolLost) as e:
            await await_unless_gone(queued_in_the_handle(), "speculative", health, 0.01)
        assert e.value.pool == "speculative" and cancelled == [True]
        assert asyncio.get_running_loop().time() - t0 < 1.0
        # a pool that stays: the result comes through; the other pool going does not matter
        assert await await_unless_gone(asyncio.sleep(0.05, "ok"), "vanilla", health, 0.01) == "ok"

    asyncio.run(run())


def test_cancelling_the_caller_cancels_the_request():
    async def run():
        health = PoolHealth()
        started, cancelled = asyncio.Event(), []

        async def in_pool():
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        caller = asyncio.ensure_future(await_unless_gone(in_pool(), "vanilla", health, 0.01))
        await started.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert cancelled == [True]

    asyncio.run(run())


VANILLA_ONLY = RouteDecision("vanilla", "unsupported_option", eligible=("vanilla",))


@pytest.mark.parametrize("pools, status", [
    (_pools(0, 4), 429),                  # vanilla full: never spills to speculative
    (_pools(0, 0, van_up=False), 503),    # vanilla down
])
def test_a_vanilla_only_request_is_refused_rather_than_moved(pools, status):
    assert admit(VANILLA_ONLY, pools, CAP) is None
    got, message = refusal(VANILLA_ONLY, pools)
    assert got == status and "vanilla pool" in message and "speculative" not in message


@pytest.mark.parametrize("decision, pools, status", [
    (RouteDecision("speculative", "task_gains"), _pools(4, 4), 429),          # both full
    (RouteDecision("speculative", "requested"), _pools(4, 0), 429),           # a forced full pool
    (RouteDecision("speculative", "requested"), _pools(0, 0, spec_up=False, van_up=False), 503),
])
def test_refusal_status(decision, pools, status):
    assert refusal(decision, pools)[0] == status


def test_an_empty_snapshot_from_a_board_just_restarted_is_unknown_not_gone():
    health = PoolHealth()
    up = {"speculative": PoolStats(replicas=1), "vanilla": PoolStats(replicas=1)}
    health.observe(up, board_age_s=600.0)
    health.observe({}, board_age_s=0.2)                          # the board restarted
    assert not health.gone("speculative") and health.available("vanilla")
    health.observe({"vanilla": PoolStats(replicas=1)}, board_age_s=1.0)
    assert not health.gone("speculative")                        # not reported yet: unknown
    health.observe({"vanilla": PoolStats(replicas=1)}, board_age_s=STALE_AFTER_S)
    assert health.gone("speculative")                            # every live one has reported


def test_a_pool_that_may_scale_to_zero_is_asleep_while_it_has_no_replica():
    health = PoolHealth(scales_to_zero=["speculative"])
    assert not health.asleep("speculative")                      # no view yet
    health.observe({"vanilla": PoolStats(replicas=1)})
    assert health.asleep("speculative") and not health.available("speculative")
    assert not health.asleep("vanilla")
    health.observe({"speculative": PoolStats(replicas=1), "vanilla": PoolStats(replicas=1)})
    assert not health.asleep("speculative") and health.available("speculative")
    health.observe({"vanilla": PoolStats(replicas=1)})           # scaled back to zero
    assert health.asleep("speculative") and health.gone("speculative")
