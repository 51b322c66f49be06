"""Engine stats of each pool, shared by every ingress replica through one small Ray actor.

Each pool replica pushes its vLLM engine stats every `PUSH_PERIOD_S`; each ingress replica pushes the
requests it has in flight per pool and reads the merged `PoolStats`. So pressure is global (two
ingress replicas do not each believe they own the pool) and the staleness is bounded:
an entry is at most `PUSH_PERIOD_S` old when fresh and dropped after `STALE_AFTER_S` (a dead replica).

Lifetime: one board per application name, detached (so no replica owns it: it survives replica
and Serve controller restarts) and restarted by Ray if its process dies. It removes itself once
Serve has not listed its application for `APP_GONE_AFTER_S` (`serve delete`, `serve.shutdown()`).
What the board holds for the router (the runtime pin) is keyed by the application's build
`generation` (deployments/app.py), so a redeploy starts without the old pin while pool replicas,
which may span two builds during a rollout, keep reporting to the same board. A restarted board
knows nothing for `STALE_AFTER_S`: readers take its `BoardSnapshot.age_s` into account
(router/decider.py).
"""
from __future__ import annotations

import logging
import threading
import time
import uuid

import ray
from ray import serve
from ray.serve.exceptions import RayServeException

from core.arrivals import ArrivalCounts, offered_load
from core.stats import STALE_AFTER_S, BoardSnapshot, EngineStats, PoolStats, RouterState
from core.step_time import StepTimeModel

APP_GONE_AFTER_S = 30.0
ARRIVALS_KEPT_S = 600.0  # the longest window `autoscaling_inputs` may ask for
BOARD_NAMESPACE = "specserve"

logger = logging.getLogger("specserve.stats")


@ray.remote(num_cpus=0, max_restarts=-1)
class StatsBoard:
    """Latest report of every pool replica and every ingress replica, keyed by replica id.

    Args:
        app_name: the Serve application it belongs to ("": none, never removes itself).
    """

    def __init__(self, app_name: str = "") -> None:
        self._started = time.monotonic()
        self._epoch = uuid.uuid4().hex  # a new one each (re)start
        self._engines: dict[str, tuple[str, float, EngineStats]] = {}  # id -> (pool, t, stats)
        # ingress id -> (t, sequences per pool, their context tokens per pool)
        self._in_flight: dict[str, tuple[float, dict[str, int], dict[str, int]]] = {}
        self._acceptance: dict[str, tuple[float, dict]] = {}  # ingress id -> (t, its counts)
        self._speculators: dict[str, tuple[float, dict]] = {}  # ingress id -> (t, its tallies)
        self._rollout: dict = {}  # deployments/rollout.py: state, candidate, outcomes
        self._pin: tuple[str, str | None] = ("", None)  # (generation, runtime pin); None: config's
        self._builds: dict[str, tuple[float, float]] = {}  # generation -> (first, last) read
        self._autoscaler: dict = {"calls": 0, "events": []}  # autoscaling/controller.py
        # router id -> (its start, [(t, cumulative arrival counts)]), this board's wall clock
        self._arrivals: dict[str, tuple[float, list[tuple[float, ArrivalCounts]]]] = {}
        # pool -> step times as a request lives them (profile + samples), kept at 0 replicas
        self._step_models: dict[str, StepTimeModel] = {}
        self._seen_samples: dict[str, int] = {}  # replica id -> its last sample folded in
        # deployments/profile.py `profile_key` -> the startup profile last measured with it
        self._profiles: dict[str, dict] = {}
        if app_name:
            threading.Thread(target=self._remove_when_app_gone, args=(app_name,),
                             daemon=True).start()

    def _remove_when_app_gone(self, app_name: str) -> None:
        """Kills this actor (no restart) once Serve has not listed `app_name` in two checks
        `APP_GONE_AFTER_S` apart."""
        missing = 0
        while True:
            time.sleep(APP_GONE_AFTER_S)
            try:
                listed = app_name in serve.status().applications
            except RayServeException:  # no Serve instance running: the application is gone
                listed = False
            except Exception:  # the controller unreachable for now: no conclusion
                logger.exception("Serve status unavailable")
                continue
            missing = 0 if listed else missing + 1
            if missing >= 2:
                logger.info("application %r is gone: removing its stats board", app_name)
                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                return

    def report_engine(self, replica_id: str, pool: str, stats: EngineStats) -> None:
        self._engines[replica_id] = (pool, time.monotonic(), stats)

    def forget_engine(self, replica_id: str) -> None:
        """A pool replica that stops gracefully leaves the board at once, not after
        `STALE_AFTER_S`."""
        self._engines.pop(replica_id, None)

    def remember_profile(self, key: str, replica_id: str, profile: dict[int, float],
                         context: tuple[float, float]) -> None:
        """A replica's startup profile ({batch: seconds per decode step}) and context cost
        (κ s per sequence per context token, L_ref tokens), measured on the engine and hardware
        `key` names (deployments/profile.py `profile_key`), for the next replica of that engine
        (`known_profile`). Kept while the board lives, whatever the replica does; an empty
        profile is not kept."""
        if profile:
            self._profiles[key] = {"replica": replica_id, "t": time.time(),
                                   "profile": dict(profile), "context": tuple(context)}

    def known_profile(self, key: str) -> dict | None:
        """The profile last remembered for `key`: {"replica": who measured it, "t": when (epoch
        s), "profile": {batch: s}, "context": (κ, L_ref)}; None where none was (a new or
        restarted board: the replica measures its own)."""
        return self._profiles.get(key)

    def profiles(self) -> dict[str, dict]:
        """Every remembered profile, {key: `known_profile`'s answer} (for operators and tests)."""
        return dict(self._profiles)

    def report_in_flight(self, ingress_id: str, in_flight: dict[str, int],
                         context: dict[str, int] | None = None) -> None:
        """An ingress replica's sequences in flight per pool, and their context tokens per pool
        (prompt + half the expected output each; None: not counted)."""
        self._in_flight[ingress_id] = (time.monotonic(), dict(in_flight), dict(context or {}))

    def report_autoscaler(self, calls: int, events: list[dict]) -> None:
        """The autoscaling policy's invocation count and its new decision events."""
        self._autoscaler["calls"] = calls
        self._autoscaler["events"] = (self._autoscaler["events"] + events)[-1000:]

    def report_arrivals(self, router_id: str, age_s: float, counts: ArrivalCounts) -> None:
        """A router's cumulative arrivals per class over its last `age_s` seconds
        (`core.ArrivalCounter`); the start is placed on this board's clock (routers run on
        other nodes)."""
        now = time.time()
        started, reports = self._arrivals.get(router_id, (now - age_s, []))
        reports = [r for r in reports if now - r[0] <= ARRIVALS_KEPT_S] + [(now, counts)]
        self._arrivals[router_id] = (started, reports)

    def autoscaling_inputs(self, window_s: float, max_num_seqs: dict[str, int] | None = None
                           ) -> dict:
        """What the budget split needs (autoscaling/controller.py):
        {"demand": `core.arrivals.offered_load` over `window_s`, or None before any router
        reported; "step_times": {pool: {batch: seconds per step as a request lives it}}, the
        router's model (`StepTimeModel.points`: the replicas' startup profiles, then their
        served samples, each folded once)}. A pool at 0 keeps its last curve, but only in this
        board's memory: a restarted board knows no curve for a pool until it runs again (the
        rules decide meanwhile)."""
        now = time.time()
        for rid, (_, reports) in list(self._arrivals.items()):
            if now - reports[-1][0] > ARRIVALS_KEPT_S:  # a router gone for good
                del self._arrivals[rid]
        for pool, stats in self.snapshot().pools.items():
            model = self._step_models.setdefault(
                pool, StepTimeModel(max_batch=(max_num_seqs or {}).get(pool)))
            model.fold(stats.profile, stats.step_samples, self._seen_samples,
                       stats.profile_context, stats.mean_context)
        demand = offered_load(self._arrivals.values(), now, window_s) if self._arrivals \
            else None
        return {"demand": demand, "step_times": {p: m.points() for p, m in
                                                 self._step_models.items() if m.points()}}

    def autoscaler(self) -> dict:
        """{"calls": policy invocations, "events": the last 1000 decision events}."""
        return self._autoscaler

    def snapshot(self, exclude_ingress: str = "") -> BoardSnapshot:
        """Per pool: fresh replicas, summed stats and in-flight requests of the other ingresses;
        with the board's age."""
        now = time.monotonic()
        pools: dict[str, PoolStats] = {}
        profiles: dict[tuple[str, int], list[float]] = {}
        contexts: dict[str, list[tuple[float, float]]] = {}
        for rid, (pool, t, stats) in list(self._engines.items()):
            if now - t > STALE_AFTER_S:
                del self._engines[rid]
                continue
            p = pools.setdefault(pool, PoolStats())
            p.lossless_sampling = stats.lossless_sampling and (p.lossless_sampling
                                                               or not p.replicas)
            p.replicas += 1
            p.engine.add(stats)
            if stats.step_s > 0:
                p.step_samples.append((rid, stats.step_sample_id, stats.step_batch, stats.step_s))
            for batch, step_s in stats.profile.items():
                profiles.setdefault((pool, batch), []).append(step_s)
            if stats.profile_context[1] > 0:  # measured (κ may be 0)
                contexts.setdefault(pool, []).append(stats.profile_context)
        for (pool, batch), times in profiles.items():  # mean over the pool's replicas
            pools[pool].profile[batch] = sum(times) / len(times)
        for pool, costs in contexts.items():
            pools[pool].profile_context = (sum(c[0] for c in costs) / len(costs),
                                           sum(c[1] for c in costs) / len(costs))
        for iid, (t, counts, context) in list(self._in_flight.items()):
            if now - t > STALE_AFTER_S:
                del self._in_flight[iid]
            elif iid != exclude_ingress:
                for pool, n in counts.items():
                    pools.setdefault(pool, PoolStats()).in_flight += n
                for pool, n in context.items():
                    pools.setdefault(pool, PoolStats()).in_flight_context += n
        return BoardSnapshot(pools, now - self._started)


    def report_acceptance(self, ingress_id: str, counts: dict) -> None:
        """An ingress replica's own decayed acceptance counts (`AcceptanceEstimator.local_counts`)."""
        self._acceptance[ingress_id] = (time.monotonic(), counts)

    def report_speculators(self, ingress_id: str, counts: dict) -> None:
        """An ingress replica's live acceptance per speculator and task
        (`SpeculatorTallies.counts`, core/rollout.py)."""
        self._speculators[ingress_id] = (time.monotonic(), counts)

    def replica_speculators(self) -> dict[str, dict]:
        """{pool replica id: {"pool", "speculator" (the `system_fingerprint` it serves),
        "lossless_sampling"}} of the live pool replicas (engine up, reported within
        `STALE_AFTER_S`)."""
        now = time.monotonic()
        return {rid: {"pool": pool, "speculator": stats.speculator,
                      "lossless_sampling": stats.lossless_sampling}
                for rid, (pool, t, stats) in self._engines.items() if now - t <= STALE_AFTER_S}

    def set_rollout(self, event: dict) -> dict:
        """Records a rollout step from its controller (deployments/rollout.py): `event` has
        "state" (canary | forward | back) and what it concerns ("candidate", "incumbent",
        "detail"); "forward" and "back" also count as outcomes. Returns the rollout state."""
        outcomes = dict(self._rollout.get("outcomes", {}))
        if event.get("state") in ("forward", "back"):
            outcomes[event["state"]] = outcomes.get(event["state"], 0) + 1
        self._rollout = {**event, "outcomes": outcomes, "since_unix_s": time.time()}
        return self._rollout

    def set_pin(self, pin: str | None, generation: str = "") -> None:
        """Pins every ingress replica's `auto` requests to a path ("auto" too); None: the config's.
        The pin holds for ingress replicas of the same application build `generation` only."""
        self._pin = (generation, pin)

    def router_state(self, exclude_ingress: str = "", generation: str | None = "") -> RouterState:
        """The runtime pin of this `generation` and the other ingress replicas' acceptance
        counts.

        Args:
            exclude_ingress: the caller's id (its own counts are not returned).
            generation: the caller's application build (an ingress replica); None (a batch
                driver, which belongs to no build): the newest build whose ingress replicas read
                the board within `STALE_AFTER_S`, none if no ingress did.
        """
        now = time.monotonic()
        if generation is not None:
            first, _ = self._builds.get(generation, (now, now))
            self._builds[generation] = (first, now)
        for build, (_, last) in list(self._builds.items()):
            if now - last > STALE_AFTER_S:
                del self._builds[build]
        if generation is None:
            generation = max(self._builds, key=lambda b: self._builds[b][0], default=None)
        published = []
        for iid, (t, counts) in list(self._acceptance.items()):
            if now - t > STALE_AFTER_S:
                del self._acceptance[iid]
            elif iid != exclude_ingress:
                published.append(counts)
        tallies = []
        for iid, (t, counts) in list(self._speculators.items()):
            if now - t > STALE_AFTER_S:
                del self._speculators[iid]
            else:
                tallies.append(counts)
        pin_generation, pin = self._pin
        return RouterState(pin if pin_generation == generation else None, published, self._epoch,
                           tallies, dict(self._rollout))


def get_board(app_name: str) -> ray.actor.ActorHandle:
    """The application's StatsBoard, created on first use (detached, so no replica owns it;
    it removes itself once the application is gone: module docstring)."""
    return StatsBoard.options(name=f"stats-{app_name}", namespace=BOARD_NAMESPACE,
                              lifetime="detached", get_if_exists=True).remote(app_name)
