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
(router/health.py).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

import ray
from ray import serve
from ray.serve.exceptions import RayServeException

PUSH_PERIOD_S = 0.5
STALE_AFTER_S = 5.0
APP_GONE_AFTER_S = 30.0
BOARD_NAMESPACE = "specserve"

logger = logging.getLogger("specserve.stats")

_GAUGES = {"vllm:num_requests_running": "num_requests_running",
           "vllm:num_requests_waiting": "num_requests_waiting",
           "vllm:kv_cache_usage_perc": "kv_cache_usage"}
_COUNTERS = {"vllm:generation_tokens": "generation_tokens",
             "vllm:prompt_tokens": "prompt_tokens",
             "vllm:spec_decode_num_drafts": "num_drafts",
             "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}


@dataclass(slots=True)
class EngineStats:
    """One engine's (or a pool's summed) vLLM stats; counters are totals since engine start.

    Spec-decode counters follow vLLM (`vllm:spec_decode_*`): `num_drafts` target steps that carried
    drafts, `num_draft_tokens` proposed, `num_accepted_tokens` accepted, `accepted_per_pos[i]`
    accepted at draft position i. Derived figures (../shared/DESIGN.md §2):
    acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts;
    per-position α_1 = pos[0] / drafts, α_j = pos[j-1] / pos[j-2].
    """

    num_requests_running: int = 0
    num_requests_waiting: int = 0
    kv_cache_usage: float = 0.0  # fraction of KV blocks in use, 0..1
    generation_tokens: int = 0
    prompt_tokens: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    iterations: int = 0  # engine steps (count of vllm:iteration_tokens_total)
    # vllm:inter_token_latency_seconds: one observation per output of a running request after
    # its first token (one verification or decode step of that request), engine timestamps.
    itl_count: int = 0
    itl_sum_s: float = 0.0
    # Latest busy-window sample of this replica for the router: seconds per decode step as a
    # request lives it, at a mean count of requests in the engine (running + waiting;
    # `busy_window_samples`); `step_sample_id` (the iteration count at its end)
    # lets readers take each sample once.
    step_s: float = 0.0
    step_batch: float = 0.0
    step_sample_id: int = 0
    # Startup profile of this replica: {running batch: seconds per engine step}.
    profile: dict[int, float] = field(default_factory=dict)
    # The replica's startup check (deployments/sampling_check.py): its engine samples the
    # target's distribution on the speculative path at temperature > 0.
    lossless_sampling: bool = False

    @classmethod
    def from_vllm_snapshot(cls, metrics: list) -> EngineStats:
        """Sums `vllm.v1.metrics.reader.get_metrics_snapshot()` over its label sets."""
        s = cls()
        for m in metrics:
            if m.name in _GAUGES:
                attr = _GAUGES[m.name]
                setattr(s, attr, getattr(s, attr) + type(getattr(s, attr))(m.value))
            elif m.name in _COUNTERS:
                attr = _COUNTERS[m.name]
                setattr(s, attr, getattr(s, attr) + int(m.value))
            elif m.name == "vllm:iteration_tokens_total":
                s.iterations += int(m.count)
            elif m.name == "vllm:inter_token_latency_seconds":
                s.itl_count += int(m.count)
                s.itl_sum_s += float(m.sum)
            elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
                s.accepted_per_pos = _add_lists(s.accepted_per_pos, list(m.values))
        return s

    def add(self, other: EngineStats) -> None:
        """Adds another engine's stats in place (kv_cache_usage becomes the maximum)."""
        for name in ("num_requests_running", "num_requests_waiting", "generation_tokens",
                     "prompt_tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                     "iterations", "itl_count", "itl_sum_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.kv_cache_usage = max(self.kv_cache_usage, other.kv_cache_usage)
        self.accepted_per_pos = _add_lists(self.accepted_per_pos, other.accepted_per_pos)

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / proposed draft tokens (vLLM's "acceptance rate"; not α)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens emitted per target step that carried drafts: 1 + accepted / drafts."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None


def busy_window_samples(prev: EngineStats, now: EngineStats, wall_s: float
                        ) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """Step-time samples of one engine over a window of `wall_s` seconds between two snapshots.

    Returns (engine_step, request_step), each (batch, seconds) or None when the engine was idle
    at either end of the window or made no progress:

    - engine_step: seconds per engine step, Δwall / Δiterations, at the mean running batch
      (the autoscaler's roofline, deployments/utilization.py);
    - request_step: seconds per decode step as a request lives it, the mean of vLLM's
      inter-token latencies in the window (Δsum / Δcount of `vllm:inter_token_latency_seconds`:
      the engine time between two outputs of one running request, each output one verification
      or decode step), at N = the mean count of requests in the engine (running + waiting).
      Steps spent on other requests' prefills and on the other pool's work on shared cores
      lengthen it; time the engine sits idle between requests, and each request's prefill, do
      not (a window's Δwall / Δsteps counted both: on this 2-core box that made a speculative
      step at batch 1 look about 3x slower than it is, because its requests end sooner and
      leave more idle gaps, session-3 benchmark). E[τ] / request_step is a request's decode token rate.
    """
    if not (prev.num_requests_running and now.num_requests_running) or wall_s <= 0:
        return None, None
    steps = now.iterations - prev.iterations
    engine_step = ((prev.num_requests_running + now.num_requests_running) / 2, wall_s / steps
                   ) if steps > 0 else None
    outputs = now.itl_count - prev.itl_count
    in_engine = (prev.num_requests_running + prev.num_requests_waiting
                 + now.num_requests_running + now.num_requests_waiting) / 2
    request_step = (in_engine, (now.itl_sum_s - prev.itl_sum_s) / outputs) if outputs > 0 else None
    return engine_step, request_step


def _add_lists(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


@dataclass(slots=True)
class PoolStats:
    """A pool as the whole application sees it: live replicas, summed engine stats, and the
    requests every ingress replica has in flight to it."""

    replicas: int = 0
    in_flight: int = 0
    engine: EngineStats = field(default_factory=EngineStats)
    # Each replica's latest step-time sample: (replica id, sample id, mean batch, seconds/step).
    step_samples: list[tuple[str, int, float, float]] = field(default_factory=list)
    # Startup profiles of the pool's replicas: {running batch: mean seconds per engine step}.
    profile: dict[int, float] = field(default_factory=dict)
    # Every live replica passed its sampling check (False while none has reported).
    lossless_sampling: bool = False


@dataclass(slots=True)
class BoardSnapshot:
    """`StatsBoard.snapshot()`: per pool its `PoolStats`, and the board's age in seconds (below
    `STALE_AFTER_S` a pool it lists no replica of is unknown, not gone: a live replica may not
    have reported to a board that has just (re)started)."""

    pools: dict[str, PoolStats]
    age_s: float


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
        self._in_flight: dict[str, tuple[float, dict[str, int]]] = {}  # ingress id -> (t, per pool)
        self._acceptance: dict[str, tuple[float, dict]] = {}  # ingress id -> (t, its counts)
        self._pin: tuple[str, str | None] = ("", None)  # (generation, runtime pin); None: config's
        self._builds: dict[str, tuple[float, float]] = {}  # generation -> (first, last) read
        self._autoscaler: dict = {"calls": 0, "events": []}  # deployments/autoscaler.py
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

    def report_in_flight(self, ingress_id: str, in_flight: dict[str, int]) -> None:
        self._in_flight[ingress_id] = (time.monotonic(), dict(in_flight))

    def report_autoscaler(self, calls: int, events: list[dict]) -> None:
        """The autoscaling policy's invocation count and its new decision events."""
        self._autoscaler["calls"] = calls
        self._autoscaler["events"] = (self._autoscaler["events"] + events)[-1000:]

    def autoscaler(self) -> dict:
        """{"calls": policy invocations, "events": the last 1000 decision events}."""
        return self._autoscaler

    def snapshot(self, exclude_ingress: str = "") -> BoardSnapshot:
        """Per pool: fresh replicas, summed stats and in-flight requests of the other ingresses;
        with the board's age."""
        now = time.monotonic()
        pools: dict[str, PoolStats] = {}
        profiles: dict[tuple[str, int], list[float]] = {}
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
        for (pool, batch), times in profiles.items():  # mean over the pool's replicas
            pools[pool].profile[batch] = sum(times) / len(times)
        for iid, (t, counts) in list(self._in_flight.items()):
            if now - t > STALE_AFTER_S:
                del self._in_flight[iid]
            elif iid != exclude_ingress:
                for pool, n in counts.items():
                    pools.setdefault(pool, PoolStats()).in_flight += n
        return BoardSnapshot(pools, now - self._started)


    def report_acceptance(self, ingress_id: str, counts: dict) -> None:
        """An ingress replica's own decayed acceptance counts (`AcceptanceEstimator.local_counts`)."""
        self._acceptance[ingress_id] = (time.monotonic(), counts)

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
        pin_generation, pin = self._pin
        return RouterState(pin if pin_generation == generation else None, published, self._epoch)


@dataclass(slots=True)
class RouterState:
    """What ingress replicas share besides pool stats.

    Attributes:
        pin: the runtime pin ("auto", "speculative", "vanilla"); None: use the config's `router.pin`.
        acceptance: each other ingress replica's `AcceptanceEstimator.local_counts()`.
        board_epoch: the board's id since it last (re)started.
    """

    pin: str | None = None
    acceptance: list[dict] = field(default_factory=list)
    board_epoch: str = ""


def get_board(app_name: str) -> ray.actor.ActorHandle:
    """The application's StatsBoard, created on first use (detached, so no replica owns it;
    it removes itself once the application is gone: module docstring)."""
    return StatsBoard.options(name=f"stats-{app_name}", namespace=BOARD_NAMESPACE,
                              lifetime="detached", get_if_exists=True).remote(app_name)
