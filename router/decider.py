"""The route decision and the router's live view of the pools: `RouteDecider.route(request)
-> Routed`, the one call the HTTP ingress and the batch driver decide through.

A request parsed once (`RouteDecider.parse`, router/request.py) is routed in one call: each pool's
load and health (below), the expected speedup S and the pure `choose_route` / `admit`
(router/policy.py), waking a pool scaled to zero when nothing else may take the request. The
decider keeps what the decision learns from: per-task hysteresis memory, acceptance estimates
folded from speculative responses, step times from the StatsBoard, and the runtime pin
(`PUT /admin/policy`). Ingress replicas and batch drivers share the pin and their acceptance
counts through the application's StatsBoard (`run`), so one admin call or one replica's
observations reach every replica within ~1 s.

Pressure (`PressureTracker`): the ingress counts its own requests' sequences in flight per pool
exactly (`start`/`finish`; a request of prompts × n sequences counts prompts × n); a background
task pushes those counts to the StatsBoard and pulls the other ingress replicas' counts and every
pool replica's engine stats, every `PUSH_PERIOD_S` (0.5 s): the global view is at most ~1 s stale,
the local part is exact. No blocking call sits on the request path.

Health (`PoolHealth`): a pool is unavailable for `hold_s` after a request to it failed with a
replica failure (router/streaming.py `REPLICA_FAILURES`), and for as long as the StatsBoard lists
none of its replicas once it has listed some (every replica dead or restarting: a replica reports
only once its engine serves). The router sends an unavailable pool's requests to the other pool
(reason `pool_unavailable`) and takes the pool back as soon as a replica reports again. A pool that
autoscaling may take to zero (`min_replicas: 0`) and that the board lists no replica of is
`asleep`: it starts a replica when a request wants it (router/wake.py). A board that has just
(re)started has not heard from every live replica yet: for its first `STALE_AFTER_S`, a pool it
lists no replica of keeps its previous state (unknown, not gone).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from typing import Awaitable, Callable, Iterable, Mapping, Protocol, get_args

from core import (PUSH_PERIOD_S, STALE_AFTER_S, ArrivalCounter, PoolStats, RequestedRoute, Route,
                  SpecserveConfig, TaskType, read_config_value, resolve_path)
from core.rollout import SpeculatorTallies, Tally, merge_counts
from router.errors import RequestError
from router.policy import (ALLOCATABLE, SPEEDUP_MODELS, Allocation, LoadMix, PoolLoad,
                           PricingMode, RequestFeatures, RouteDecision, Unroutable, admit,
                           allocate, choose_route, refusal)
from router.request import Limits, ParsedRequest, RequestParser, load_tokenizer

logger = logging.getLogger("specserve.router")
PINS = get_args(RequestedRoute)  # "auto", "speculative", "vanilla"
# Least seconds between two moves of the whole load from one pool to the other
# (`RouteDecider._allocated`): four board periods, so a move is judged on samples taken after it.
ALLOCATION_HOLD_S = 4 * PUSH_PERIOD_S


class PoolHealth:
    """Availability of each pool from request failures and the StatsBoard's replica list.

    Args:
        hold_s: seconds a pool stays unavailable after a failure (default: the board's staleness
            bound, by which a dead replica has left the board).
        clock: monotonic seconds (injectable for tests).
        scales_to_zero: pools whose autoscaling `min_replicas` is 0.
    """

    def __init__(self, hold_s: float = STALE_AFTER_S,
                 clock: Callable[[], float] = time.monotonic, scales_to_zero: Iterable[str] = ()):
        self._hold_s, self._clock = hold_s, clock
        self._scales_to_zero = set(scales_to_zero)
        self._failed_until: dict[str, float] = {}
        self._seen: set[str] = set()  # pools the board has listed at least once
        self._live: dict[str, int] = {}
        self._observed = False  # a first view has come in

    def observe(self, snapshot: Mapping[str, PoolStats], board_age_s: float = float("inf")
                ) -> None:
        """Takes the board's latest view: live (reporting) replicas per pool, from a board
        (re)started `board_age_s` seconds ago (`BoardSnapshot.age_s`)."""
        live = {pool: p.replicas for pool, p in snapshot.items()}
        if board_age_s < STALE_AFTER_S:  # a pool listed with none may not have reported yet
            live = {**self._live, **{pool: n for pool, n in live.items() if n > 0}}
        self._live = live
        self._seen.update(pool for pool, n in self._live.items() if n > 0)
        self._observed = True

    def failed(self, pool: str) -> None:
        """A request to `pool` failed with one of REPLICA_FAILURES."""
        self._failed_until[pool] = self._clock() + self._hold_s

    def gone(self, pool: str) -> bool:
        """True while the board, having listed replicas of `pool`, lists none (all dead or
        restarting). Unlike `available`, one failed request does not make a pool gone: its
        other replicas may still serve."""
        return pool in self._seen and self._live.get(pool, 0) == 0

    def asleep(self, pool: str) -> bool:
        """True while `pool` may scale to zero and the board lists none of its replicas (once
        a first view is in): scaled to zero, or its replicas all gone and none wanted."""
        return (pool in self._scales_to_zero and self._observed
                and self._live.get(pool, 0) == 0)

    def available(self, pool: str) -> bool:
        """False while `pool` is gone, asleep or within `hold_s` of a replica failure."""
        if self._clock() < self._failed_until.get(pool, 0.0):
            return False
        return not self.gone(pool) and not self.asleep(pool)


class PressureTracker:
    """Requests in flight per pool plus the latest StatsBoard snapshot.

    Args:
        board: the application's StatsBoard actor handle (None: local counts only).
        ingress_id: this ingress replica's id (its counts are excluded from the board's sum).
        configured_replicas: replicas per configured pool, used until the board reports.
    """

    def __init__(self, board, ingress_id: str, configured_replicas: Mapping[Route, int]):
        self._board = board
        self._ingress_id = ingress_id
        self._configured = dict(configured_replicas)
        self._local: dict[Route, int] = {pool: 0 for pool in configured_replicas}
        self._local_context: dict[Route, int] = {pool: 0 for pool in configured_replicas}
        self.remote: dict[str, PoolStats] = {}
        self.board_age_s = float("inf")  # of the board when it gave `remote` (BoardSnapshot)

    def start(self, pool: Route, sequences: int = 1, context: int = 0) -> None:
        """Counts a request of `sequences` sequences (prompts × n) in flight to `pool`, with
        `context` tokens of context over all of them (`RequestFeatures.context_tokens` ×
        sequences; 0: not counted)."""
        self._local[pool] += sequences
        self._local_context[pool] += context

    def finish(self, pool: Route, sequences: int = 1, context: int = 0) -> None:
        """Releases what `start(pool, sequences, context)` counted."""
        self._local[pool] -= sequences
        self._local_context[pool] -= context

    def local_in_flight(self, pool: Route) -> int:
        return self._local[pool]

    def local_in_flight_all(self) -> dict[Route, int]:
        """This replica's (or batch driver's) own sequences in flight, per configured pool."""
        return dict(self._local)

    def pool_stats(self) -> dict[Route, PoolStats]:
        """Every configured pool's board view with in-flight requests of all ingress replicas."""
        out = {}
        for pool, configured in self._configured.items():
            seen = self.remote.get(pool) or PoolStats()
            out[pool] = dataclasses.replace(
                seen, replicas=seen.replicas or configured,
                in_flight=self._local[pool] + seen.in_flight,
                in_flight_context=self._local_context[pool] + seen.in_flight_context)
        return out

    def reported_replicas(self) -> dict[Route, int]:
        """Replicas of each configured pool that the StatsBoard lists (a replica reports once its
        engine serves); 0 before the board lists any."""
        return {pool: (self.remote.get(pool) or PoolStats()).replicas
                for pool in self._configured}

    def loads(self) -> dict[Route, PoolLoad]:
        """Every configured pool's live replicas and in-flight requests (all ingress replicas).

        Until a pool's replicas report, its configured replica count stands in, and its sampling
        counts as not verified lossless.
        """
        return {pool: PoolLoad(p.replicas, p.in_flight, lossless_sampling=p.lossless_sampling,
                               context_tokens=p.in_flight_context)
                for pool, p in self.pool_stats().items()}

    async def run(self, on_snapshot: Callable[[dict[str, PoolStats]], None] | None = None) -> None:
        """Push local counts and pull the board's snapshot forever (cancel to stop).

        Args:
            on_snapshot: called with each new snapshot (e.g. to fold step-time samples).
        """
        while True:
            try:
                self._board.report_in_flight.remote(self._ingress_id, dict(self._local),
                                                    dict(self._local_context))
                snapshot = await self._board.snapshot.remote(self._ingress_id)
                self.remote, self.board_age_s = snapshot.pools, snapshot.age_s
                if on_snapshot is not None:
                    on_snapshot(self.remote)
            except Exception:  # the board restarts on failure; keep the last view meanwhile
                logger.exception("stats board unreachable")
            await asyncio.sleep(PUSH_PERIOD_S)


class Waker(Protocol):
    """Starts a pool scaled to zero (router/wake.py `PoolWaker`)."""

    def wake(self, pool: Route) -> None:
        """Makes `pool` count as demand, without waiting."""

    def wait_awake(self, pool: Route) -> Awaitable[float | None]:
        """Wakes `pool`; seconds until a replica reported, or None past the wait bound."""


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request reaches no pool: the HTTP status, the OpenAI error message, and the outcome
    counted in `specserve_route_decisions_total` (None: not counted)."""

    status: int
    message: str
    outcome: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Routed:
    """One request's route, or why it has none.

    Attributes:
        request: the parsed request.
        features: its features with E[τ] as the decision saw it (`expected_tokens`).
        decision: the pool and reason (after admission); None when no pool was up to decide on.
        loads: each pool's load the decision saw (after a wake: as the pool woke).
        refusal: set when the request goes nowhere: answer it with this error.
        woken_after_s: seconds the request waited for its pool to scale from zero (None: none).
    """

    request: ParsedRequest
    features: RequestFeatures
    decision: RouteDecision | None
    loads: Mapping[Route, PoolLoad]
    refusal: Refusal | None = None
    woken_after_s: float | None = None

    @property
    def headers(self) -> dict[str, str]:
        """The response headers that explain the decision (`route_headers`), plus
        `x-specserve-scaled-from-zero-s` after a wake."""
        if self.decision is None:
            return {}
        if self.refusal is not None:
            return {"x-specserve-route": self.decision.route,
                    "x-specserve-reason": self.decision.reason}
        headers = route_headers(self.features, self.decision)
        if self.woken_after_s is not None:
            headers["x-specserve-scaled-from-zero-s"] = f"{self.woken_after_s:.1f}"
        return headers

    def log_record(self, request_id: str | None) -> dict:
        """The decision's structured log line (`"event": "route"`)."""
        features, decision = self.features, self.decision
        return {"event": "route", "request_id": request_id, "route": decision.route,
                "reason": decision.reason, "task": features.task,
                "temperature": features.temperature,
                "expected_tokens": round(features.expected_tokens, 3),
                "context_tokens": features.context_tokens,
                "speedup": None if decision.speedup is None else round(decision.speedup, 3),
                "in_flight": {p: load.in_flight for p, load in self.loads.items()}}


class RouteDecider:
    """Per-request route decisions for one application: `parse` a body once, then `route` it.

    Args:
        cfg: the application's config.
        pools: the pools the application runs ("vanilla", "speculative" or both).
        generation: the application build's id (deployments/app.py): the runtime pin on the
            StatsBoard holds within one build. None (a batch driver): it follows the pin of the
            application's newest build and never writes one.
        board: the application's StatsBoard actor (None: local counts only, no step times).
        replica_id: this ingress replica's (or batch driver's) id on the board.
        pricing: how S prices the pools (router/policy.py): "latency" for a request a user
            waits for, "throughput" for a batch job's rows.
        health: the pools' availability (the ingress's); None: every pool counts as available.
        waker: starts a pool scaled to zero that a request waits for (the ingress's
            router/wake.py `PoolWaker`); None: no pool sleeps (no `health`).
    """

    def __init__(self, cfg: SpecserveConfig, pools: Iterable[Route],
                 generation: str | None = "", board=None, replica_id: str = "",
                 pricing: PricingMode = "latency", health: PoolHealth | None = None,
                 waker: Waker | None = None):
        self.cfg = cfg
        self.pools = list(pools)
        self.generation = generation
        self.board, self.replica_id = board, replica_id
        self._board_epoch: str | None = None  # at the last board read: another is a restart
        # live acceptance per speculator fingerprint and task (core/rollout.py), this replica's
        # own; `shared_speculators`: every ingress replica's, from the last board read
        self.speculators = SpeculatorTallies()
        self.shared_speculators: list[dict] | None = None
        self.rollout: dict = {}  # the rollout state at the last board read
        speculator = cfg.speculative.speculator
        self.speedup_model = SPEEDUP_MODELS[pricing](
            speculator.num_speculative_tokens,
            {p: getattr(cfg, p).max_num_seqs for p in self.pools},
            schedule=speculator.num_speculative_tokens_per_batch_size)
        self.speedup_model.alone_steps = cfg.router.allocate_load
        self.pressure = PressureTracker(board, replica_id,
                                        {p: cfg.initial_replicas(p) for p in self.pools})
        self.health, self.waker = health, waker
        scaling = cfg.autoscaling
        # Under the budget split a pool at 0 replicas is the split's choice: the routers count the
        # load per class and the split sizes the pools from it, so a request that ran on the other
        # pool wakes nothing. Otherwise a wanted pool at 0 replicas is woken per request.
        self._wake_wanted_pools = not (scaling.enabled and scaling.policy == "budget")
        self.parser = RequestParser(
            Limits(cfg.model.max_model_len, read_config_value(cfg.model.path, "vocab_size"),
                   cfg.server.max_n, cfg.server.max_sequences_per_request),
            load_tokenizer(resolve_path(cfg.model.path)),
            # Tokens of context the speculator drafts within (None: unbounded or no such pool).
            cfg.speculative.speculator.context_len() if "speculative" in self.pools else None)
        self._last_auto_route: dict[TaskType, Route] = {}  # per task type, for hysteresis
        # Where the load runs when the pools slow each other (router/policy.py `allocate`): the
        # recent traffic as the per-request rule splits it, the allocation in force and the
        # decode rates (tokens/s) it was chosen from.
        self.load_mix = LoadMix()
        self.allocation: Allocation = "split"
        self.allocation_rates: dict[Allocation, float] = {}
        # the pool the load last went to as a whole, and when (monotonic seconds)
        self._pool_allocated: Allocation | None = None
        self._allocated_at = -math.inf
        self.clock: Callable[[], float] = time.monotonic
        self._runtime_pin: str | None = None  # None: the config's router.pin
        self._pin_version = 0  # bumped by set_pin: a board read that spans it is stale
        self.arrivals = ArrivalCounter()  # offered load per class, for the autoscaling policy

    @property
    def pin(self) -> str:
        """The pin in force: the runtime one if set, else the config's `router.pin`."""
        return self._runtime_pin or self.cfg.router.pin

    @property
    def pin_source(self) -> str:
        """"runtime" when the admin endpoint set the pin in force, else "config"."""
        return "config" if self._runtime_pin is None else "runtime"

    def set_pin(self, pin: str | None) -> None:
        """Pins `auto` requests to a path ("auto" unpins); None returns to the config's pin.

        Raises:
            ValueError: `pin` is not None, "auto", "speculative" or "vanilla", or names a pool the
                application does not run.
        """
        if pin is not None and pin not in PINS:
            raise ValueError(f"pin: must be one of {list(PINS)} or null, got {pin!r}")
        if pin not in (None, "auto") and pin not in self.pools:
            raise ValueError(f"pin: pool {pin!r} is not configured")
        self._runtime_pin = pin
        self._pin_version += 1

    def parse(self, body) -> ParsedRequest:
        """`body` validated and read once (router/request.py `RequestParser.parse`), as the ingress
        and the batch driver both take a request.

        Raises:
            RequestError: 400 naming the field.
        """
        return self.parser.parse(body)

    def loads(self) -> dict[Route, PoolLoad]:
        """Each configured pool's live replicas, sequences in flight (every ingress replica and
        batch driver) and availability."""
        loads = self.pressure.loads()
        if self.health is None:
            return loads
        return {pool: dataclasses.replace(load, available=self.health.available(pool),
                                          asleep=self.health.asleep(pool))
                for pool, load in loads.items()}

    async def route(self, request: ParsedRequest, admission: bool = True) -> Routed:
        """The pool `request` runs on, or why it runs nowhere (`Routed.refusal`).

        In order: no pool up or asleep: 503; the decision (`decide`); a chosen pool scaled to
        zero is woken and waited for (at most `autoscaling.scale_from_zero_wait_s`, else 503),
        and one the request went around because it sleeps is woken unless the budget split owns
        the pool sizes; then admission within `server.max_in_flight_per_replica` (`admit`: 429
        or 503 when nothing it may take has room).

        Args:
            request: from `parse`.
            admission: bound the pools' sequences in flight (the ingress); False: the caller
                bounds its own (a batch job's `--max-in-flight`).

        Raises:
            RequestError: 400 when no pool the application runs may take it (`Unroutable`: a
                forced pool it does not run, or `min_p` / `logit_bias` forced onto the
                speculative pool).
        """
        features = request.features
        loads = self.loads()
        if not any(load.available or load.asleep for load in loads.values()):
            return Routed(request, features, None, loads,
                          Refusal(503, "No pool has a live replica; retry later", None))
        features, decision = self.decide(request, loads)
        woken_after_s = None
        if loads[decision.route].asleep:  # no pool it may run on is up: wake this one, wait
            woken_after_s = await self.waker.wait_awake(decision.route)
            if woken_after_s is None:
                return Routed(request, features, RouteDecision(decision.route,
                                                               "pool_scaled_to_zero"), loads,
                              self.not_woken(decision.route))
            loads = self.loads()
        elif decision.reason == "pool_scaled_to_zero" and self._wake_wanted_pools:
            for pool in loads:  # it wanted the other pool: wake that
                if pool != decision.route and loads[pool].asleep:
                    self.waker.wake(pool)
        if not admission:
            return Routed(request, features, decision, loads, woken_after_s=woken_after_s)
        admitted = admit(decision, loads, self.cfg.server.max_in_flight_per_replica,
                         request.sequences)
        if admitted is None:
            status, message = refusal(decision, loads)
            return Routed(request, features, decision, loads, Refusal(
                status, message, "rejected_overload" if status == 429 else "rejected_unavailable"))
        return Routed(request, features, admitted, loads, woken_after_s=woken_after_s)

    def not_woken(self, pool: Route) -> Refusal:
        """503 for a request that waited `autoscaling.scale_from_zero_wait_s` for `pool`."""
        return Refusal(503, f"The {pool} pool is scaled to zero and started no replica within "
                       f"{self.cfg.autoscaling.scale_from_zero_wait_s:g} s; retry later",
                       "rejected_scaled_to_zero")

    def decide(self, request: ParsedRequest, loads: Mapping[Route, PoolLoad]
               ) -> tuple[RequestFeatures, RouteDecision]:
        """The policy's choice for `request` at `loads` (`route`'s decision before any wake or
        admission): features with E[τ] filled in, and the decision.

        Raises:
            RequestError: 400, as `route`; 503 for a sampled request only the speculative pool
                may take while none of its replicas has reported its sampling check (starting).
        """
        model = self.speedup_model
        features = dataclasses.replace(request.features, expected_tokens=model.expected_tokens(
            request.features.task, request.features.temperature, request.features.context_tokens,
            model.speculative_batch(loads)))
        router_cfg = self.cfg.router
        if self.pin != router_cfg.pin:
            router_cfg = router_cfg.model_copy(update={"pin": self.pin})
        try:
            decision = choose_route(features, loads, router_cfg,
                                    self._last_auto_route.get(features.task),
                                    self.speedup_model.speedup(features, loads))
        except Unroutable as e:
            if e.param == "temperature" and not self.pressure.reported_replicas().get(
                    "speculative"):  # not refused by its check: no replica has run it yet
                raise RequestError(503, "temperature: the speculative pool's replicas are "
                                   "starting and have not reported their sampling check yet "
                                   "(GET /health says when every pool is up); retry shortly",
                                   e.param) from None
            raise RequestError(400, str(e), e.param) from None
        if decision.reason in ("speculation_pays", "speculation_costs"):  # S chose the route
            self._last_auto_route[features.task] = decision.route
        if decision.reason in ALLOCATABLE and router_cfg.allocate_load:
            decision = self._allocated(request, features, decision, loads)
        self._count_arrival(request, features, decision, router_cfg)
        return features, decision

    def _allocated(self, request: ParsedRequest, features: RequestFeatures,
                   decision: RouteDecision, loads: Mapping[Route, PoolLoad]) -> RouteDecision:
        """`decision` (a per-request performance choice, `ALLOCATABLE`), moved to the pool the
        whole load runs faster on when the pools slow each other (`allocate`: reason
        `host_shared`, S still told); unchanged while splitting the load wins.

        The load moves from one pool to the other at most once per `ALLOCATION_HOLD_S`: the
        step times it was chosen from change only with the board's samples (every
        `PUSH_PERIOD_S`), and each move leaves both pools busy while the pool it left drains,
        so moving back sooner would flap on the noise of the moment's in-flight count. Leaving a
        pool for the split (the load drains) or taking one from it (a burst) is immediate: a
        hold there would route the next burst by the drain's last request."""
        tokens = (request.max_tokens or self.cfg.model.max_model_len - request.prompt_len)
        self.load_mix.observe(tokens * request.sequences, features.expected_tokens or 1.0,
                              decision.route == "speculative")
        now = self.clock()
        allocation, self.allocation_rates = allocate(
            self.speedup_model, self.load_mix, loads, self.allocation, self.cfg.router.hysteresis)
        if allocation == "split":
            self.allocation = allocation
        elif allocation != self._pool_allocated:  # the other pool: once per hold
            if now - self._allocated_at >= ALLOCATION_HOLD_S:
                self.allocation, self._pool_allocated, self._allocated_at = (allocation,
                                                                              allocation, now)
        else:
            self.allocation = allocation
        target = self.allocation
        if (target != "split" and target != decision.route and target in loads
                and decision.may_run_on(target) and loads[target].available):
            return RouteDecision(target, "host_shared", decision.speedup, decision.eligible)
        return decision

    def _count_arrival(self, request: ParsedRequest, features: RequestFeatures,
                       decision: RouteDecision, router_cfg) -> None:
        """Counts the request for the autoscaling policy (core/arrivals.py): its class may go
        speculative unless something keeps it vanilla whatever the load (its options, a pin or
        requested route, a temperature above the cap, a prompt past the speculator's context, an
        output limit of one token)."""
        gains = ("speculative" in self.pools and decision.may_run_on("speculative")
                 and "vanilla" not in (features.requested_route, router_cfg.pin)
                 and not features.beyond_speculator_context and not features.no_decode_step
                 and features.temperature <= router_cfg.max_speculative_temperature)
        tokens = request.max_tokens or self.cfg.model.max_model_len - request.prompt_len
        self.arrivals.observe(features.task, gains, tokens * request.sequences,
                              features.expected_tokens or 1.0)

    def retry_route(self, failed: Route, decision: RouteDecision) -> Route:
        """Where a request goes after `failed` lost it: another pool it may run on when one is
        available, else the same pool (Serve picks another of its replicas, if any)."""
        others = [p for p in self.pools if p != failed and decision.may_run_on(p)
                  and (self.health is None or self.health.available(p))]
        return others[0] if others else failed

    def learn(self, features: RequestFeatures, payload: dict) -> None:
        """Folds a speculative response's `metrics.speculative_decoding.acceptance_histogram`
        (vLLM engine flag `per_request_spec_decode_metrics`) into the acceptance estimates.

        vLLM counts only the verification steps that carried drafts (scheduler.py, `observe` under
        `scheduled_spec_token_ids`); an n-gram speculator with no match, or a sequence beyond the
        speculator's context, decodes one token per step uncounted. The policy divides E[τ] by the
        pool's mean step time over all steps, so those steps enter as steps accepting nothing:
        with h the histogram and n the completion tokens, decode steps without drafts =
        n − 1 (the prefill's token) − Σ_j (j + 1)·h[j]. Under a
        `num_speculative_tokens_per_batch_size` table with a γ = 0 range those steps are mostly
        the table's (priced at E[τ] = 1 there already) and are not added.

        Under a table the speculative pool reports per-step drafts (`per_step_drafted` /
        `per_step_accepted`, metrics level "detailed", deployments/pools.py), so a step that
        drafted γ(B) < k is not read as rejecting the positions it never proposed.
        """
        spec = (payload.get("metrics") or {}).get("speculative_decoding")
        if not spec or not spec.get("acceptance_histogram"):
            return
        histogram = list(spec["acceptance_histogram"])
        self.speculators.observe(payload.get("system_fingerprint"), features.task, histogram)
        tokens = (payload.get("usage") or {}).get("completion_tokens")
        schedule = self.speedup_model.schedule
        if tokens and not any(k == 0 for _first, _last, k in schedule or ()):
            histogram[0] += max(0, tokens - 1 - sum((j + 1) * h for j, h in enumerate(histogram)))
        self.speedup_model.acceptance.observe(
            features.task, features.temperature, histogram, features.context_tokens,
            drafted=spec.get("per_step_drafted"), accepted=spec.get("per_step_accepted"))

    def speculator_tallies(self) -> dict[str, dict[str, Tally]]:
        """Live acceptance per speculator fingerprint and task over every ingress replica (as of
        the last board read, ≤ `PUSH_PERIOD_S` old), or this replica's own without a board."""
        if self.shared_speculators is None:
            return merge_counts([self.speculators.counts()])
        return merge_counts(self.shared_speculators)

    async def run(self, on_snapshot: Callable[[], None] | None = None,
                  on_state: Callable[[], None] | None = None) -> None:
        """Until cancelled: the pool view's exchange with the StatsBoard (`PressureTracker.run`,
        folding each snapshot into step times and health) and `share_forever`; local counts
        only without a board.

        Args:
            on_snapshot: called after each pool snapshot was folded in.
            on_state: called after each router-state exchange (`share_forever`).
        """
        if self.board is None:
            return
        def observe(snapshot: dict[str, PoolStats]) -> None:
            # with this replica's own sequences in flight: the samples' context (core/step_time.py)
            self.speedup_model.update_pools(self.pressure.pool_stats())
            if self.health is not None:
                self.health.observe(snapshot, self.pressure.board_age_s)
            if on_snapshot is not None:
                on_snapshot()
        await asyncio.gather(self.pressure.run(on_snapshot=observe),
                             self.share_forever(self.board, self.replica_id, on_state))

    async def share_forever(self, board, replica_id: str,
                            on_state: Callable[[], None] | None = None) -> None:
        """Every `PUSH_PERIOD_S`: publishes this replica's acceptance and arrival counts to the
        StatsBoard and takes the runtime pin of this build and the other replicas' counts from
        it; puts the pin back on a board that restarted without it (cancel to stop).

        Args:
            board: the application's StatsBoard actor.
            replica_id: this replica's (or batch driver's) id on the board.
            on_state: called after each exchange that reached the board.
        """
        while True:
            try:
                board.report_acceptance.remote(replica_id,
                                               self.speedup_model.acceptance.local_counts())
                board.report_arrivals.remote(replica_id, self.arrivals.age_s(),
                                             self.arrivals.counts())
                board.report_speculators.remote(replica_id, self.speculators.counts())
                version = self._pin_version
                state = await board.router_state.remote(replica_id, self.generation)
                restarted = self._board_epoch not in (None, state.board_epoch)
                self._board_epoch = state.board_epoch
                if version == self._pin_version:  # no set_pin meanwhile: the board is current
                    if (restarted and state.pin is None and self._runtime_pin is not None
                            and self.generation is not None):
                        board.set_pin.remote(self._runtime_pin, self.generation)  # it lost it
                    else:
                        self._runtime_pin = state.pin
                self.speedup_model.acceptance.set_remote(state.acceptance)
                self.shared_speculators, self.rollout = state.speculators, state.rollout
                if on_state is not None:
                    on_state()
            except Exception:  # the board restarts on failure; keep the last state meanwhile
                logger.exception("stats board unreachable")
            await asyncio.sleep(PUSH_PERIOD_S)


def route_headers(features: RequestFeatures, decision: RouteDecision) -> dict[str, str]:
    """The response headers that explain a decision: route, reason, task and (when computed) S."""
    headers = {"x-specserve-route": decision.route, "x-specserve-reason": decision.reason,
               "x-specserve-task": features.task}
    if decision.speedup is not None:
        headers["x-specserve-speedup"] = f"{decision.speedup:.2f}"
    return headers
