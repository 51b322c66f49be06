"""The StatsBoard (core/stats.py) as a plain object: the runtime pin is its application
build's (a batch driver follows the newest build's), a restarted board says how young it is, a stopped replica leaves at once; and the
decider puts a pin back on a board that restarted without it."""

from __future__ import annotations

import asyncio

import pytest

from core import DEFAULT_CONFIG_PATH, STALE_AFTER_S, EngineStats, SpecserveConfig
from fakes.actor_handle import FakeBoardHandle
from router.board import StatsBoard
from router.decider import RouteDecider

Board = StatsBoard.__ray_actor_class__  # the actor's class, without Ray


def test_a_pin_holds_for_its_application_build_only():
    board = Board()
    board.set_pin("vanilla", "build-1")
    assert board.router_state("ingress-a", "build-1").pin == "vanilla"
    assert board.router_state("ingress-b", "build-1").pin == "vanilla"  # every replica of it
    assert board.router_state("ingress-c", "build-2").pin is None       # a redeploy: clean


def test_a_batch_driver_takes_the_pin_of_the_newest_live_build(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("router.board.time.monotonic", lambda: now[0])
    board = Board()
    board.set_pin("vanilla", "build-1")
    assert board.router_state("driver", None).pin is None  # no ingress has read the board yet
    board.router_state("ingress-a", "build-1")
    assert board.router_state("driver", None).pin == "vanilla"
    now[0] += 1
    board.router_state("ingress-b", "build-2")  # a redeploy rolls out: its pin is clean
    assert board.router_state("driver", None).pin is None
    board.set_pin("speculative", "build-2")
    assert board.router_state("driver", None).pin == "speculative"
    now[0] += STALE_AFTER_S + 1  # every ingress stopped reading: no build to follow
    assert board.router_state("driver", None).pin is None


def test_snapshot_says_the_board_age_and_a_stopped_replica_leaves_at_once():
    board = Board()
    board.report_engine("r1", "vanilla", EngineStats())
    snap = board.snapshot()
    assert snap.pools["vanilla"].replicas == 1 and 0 <= snap.age_s < 1.0
    board.forget_engine("r1")
    assert board.snapshot().pools == {}


def test_the_decider_puts_its_pin_back_on_a_board_that_restarted():
    async def run():
        cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
        decider = RouteDecider(cfg, ["vanilla", "speculative"], generation="build-1")
        handle = FakeBoardHandle(Board())
        decider.set_pin("vanilla")
        handle.board.set_pin("vanilla", "build-1")
        share = asyncio.ensure_future(decider.share_forever(handle, "ingress-a"))
        await asyncio.sleep(0.1)
        assert decider.pin == "vanilla"
        handle.board = Board()  # Ray restarted the board: its state is gone
        await asyncio.sleep(0.7)  # one share period
        share.cancel()
        assert decider.pin == "vanilla"
        assert handle.board.router_state("ingress-b", "build-1").pin == "vanilla"

    asyncio.run(run())


def test_the_board_sums_context_in_flight_and_averages_the_replicas_context_cost():
    board = Board()
    board.report_engine("r1", "speculative", EngineStats(profile_context=(2e-6, 60.0)))
    board.report_engine("r2", "speculative", EngineStats(profile_context=(4e-6, 80.0)))
    board.report_engine("r3", "speculative", EngineStats())  # measured none: left out
    board.report_engine("r4", "speculative", EngineStats(profile_context=(0.0, 90.0)))  # no cost
    board.report_in_flight("ingress-a", {"speculative": 2}, {"speculative": 1000})
    board.report_in_flight("ingress-b", {"speculative": 3})  # an ingress that counts no context
    pool = board.snapshot().pools["speculative"]
    assert pool.profile_context == pytest.approx((2e-6, 230 / 3))
    assert (pool.in_flight, pool.in_flight_context, pool.mean_context) == (5, 1000, 200.0)
    assert board.snapshot("ingress-a").pools["speculative"].mean_context is None


def test_a_remembered_profile_is_found_by_its_key_and_outlives_its_replica():
    board = Board()
    assert board.known_profile("k") is None  # a new board: the replica measures its own
    board.remember_profile("k", "replica-a", {1: 0.035, 2: 0.046}, (1.9e-6, 81.0))
    board.remember_profile("empty", "replica-b", {}, (0.0, 0.0))  # nothing measured: not kept
    board.forget_engine("replica-a")  # it stopped: the next replica of its engine still finds it
    known = board.known_profile("k")
    assert (known["replica"], known["profile"], known["context"]) == \
        ("replica-a", {1: 0.035, 2: 0.046}, (1.9e-6, 81.0))
    assert board.known_profile("other") is None and set(board.profiles()) == {"k"}
