"""The route policy: the expected speedup S of the speculative path (`SpeedupModel`) and the
choice it feeds, `choose_route(request, pools, config, previous, speedup)` and
`admit(decision, pools, ...)` (pure functions). The router asks both through
`RouteDecider.route` (router/decider.py).

## The choice

Given the expected speedup S of the speculative path for this request (below: the
ingress prices a request by its latency, a batch job by the throughput a row adds), the request
goes speculative when S ≥ `min_speedup`, and stays there while S ≥ `min_speedup − hysteresis` (no
flapping around the threshold). Before any step time is known (S is None) it falls back to rules:
the task's type and the speculative pool's in-flight cap. Every decision carries its reason,
returned in `x-specserve-reason` and counted in metrics.

Admission: each pool holds at most `max_in_flight_per_replica` sequences per live replica (running
in its engine or queued before it), so queues and memory stay bounded under any load. A request
counts as the sequences it starts (prompts × n, `router.request.request_sequences`). A request
whose pool is full moves to the other pool when the router chose the pool itself and the request
may run there (reason `pool_saturated`); when no pool it may take has room, it gets 429 with
`Retry-After` (503 when none of them is up) and never reaches a pool.

A request that sets an option vLLM refuses under speculative decoding (`min_p`, `logit_bias`)
may run on the vanilla pool only (`RequestFeatures.eligible_pools`): the decision carries that
(`RouteDecision.eligible`), and every later move (`pool_unavailable`, `pool_saturated`, a retry
after a replica failure in router/ingress.py) keeps to it. So does
a sampled request (temperature > 0) while the speculative pool's sampling is not verified
lossless (`PoolLoad.lossless_sampling`, deployments/sampling_check.py): specserve never serves a
distribution other than the target's.

## S

`SpeedupModel.speedup(features, loads) -> S | None` is what the route decision asks.
S = E[τ] · c_v / c_s (`core.specdecode.batched_speedup`), with E[τ] from the acceptance measured
per task type and temperature (`core.AcceptanceEstimator`) and c each pool's cost of one
sequence-step, priced by the implementation:

- `LatencySpeedup` (the HTTP ingress: a user waits for *this* request): c = T(B + 1), the step time
  at the per-replica batch the pool would run with the request, so
  S = E[τ] · T_v(B_v + 1) / T_s(B_s + 1), the batched form of Leviathan et al. 2023 evaluated at
  the batch each pool would run.
- `ThroughputSpeedup` (a batch job: no one waits, the job's tokens per second count): with
  R(n) = n / T(n / replicas) the sequence-steps per second of a pool holding n sequences, one more
  sequence adds ΔR = R(n + 1) − R(n) (0 once the pool holds max_num_seqs per replica), and
  c = 1 / ΔR, so S = E[τ] · ΔR_s / ΔR_v: a row goes speculative when it adds more tokens there.
  When neither pool adds throughput it prices as `LatencySpeedup`.

Step times T(B, L) are each pool's `core.StepTimeModel`, fed from the StatsBoard (startup profiles,
then busy-window samples, `update_pools`); L, the mean context per sequence, is that of the
pool's sequences in flight with the request's own (`PoolLoad.context_tokens`,
`RequestFeatures.context_tokens`), so a long prompt raises the step cost of both pools by their
measured κ (core/step_time.py), and the batch pricing's marginal throughput stays at the profile's
context. Each replica owns its accelerators (on CPU its cores,
deployments/cores.py), so a pool's samples are filed at its own batch.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Mapping

from core import (AcceptanceEstimator, PoolStats, RequestedRoute, Route, RouterConfig,
                  StepTimeModel, TaskType, batched_speedup, expected_tokens)
from core.specdecode import draft_tokens_at
from core.step_time import HostSharing

RECENT_SAMPLES = 512  # step-time samples `SpeedupModel.recent_samples` keeps: at one per replica
# per half-second stats push (core/stats.py), ~2 minutes of two busy single-replica pools

Reason = Literal[
    "requested",              # the request's `route` field forced the path
    "pool_unavailable",       # the chosen pool has no live replica (router/decider.py)
    "pool_scaled_to_zero",    # the pool it wanted is scaled to zero: woken; went elsewhere
    "pool_saturated",         # the chosen pool is at its in-flight bound (`admit`)
    "pinned",                 # router.pin in the config forced the path
    "only_pool",              # the other pool is not configured
    "unsupported_option",     # min_p / logit_bias: vLLM refuses them under speculative decoding
    "speculation_lossy",      # sampled (T > 0), and the speculative pool's sampling is not
                              # verified lossless (deployments/sampling_check.py)
    "beyond_speculator_context",  # prompt longer than the speculator's context: nothing to gain
    "no_decode_step",         # an output limit of one token: prefill makes it, nothing to draft
    "high_temperature",       # above router.max_speculative_temperature
    "task_gains_little",      # task type not in router.speculative_tasks
    "batch_pressure",         # no step times yet; speculative pool at its in-flight cap
    "task_gains",             # no step times yet; task accepts many draft tokens, pool has room
    "speculation_pays",       # S ≥ threshold: speculative
    "speculation_costs",      # S < threshold: vanilla
    "host_shared",            # the pools slow each other (a shared host) and the load runs
                              # faster on this one pool than split (`allocate`)
]

# The reasons `allocate`'s choice may override: the per-request performance rules. A request's
# options, a pin, a requested route, lossy sampling or an unavailable pool are never overridden.
ALLOCATABLE: frozenset[str] = frozenset({"speculation_pays", "speculation_costs",
                                         "high_temperature", "beyond_speculator_context",
                                         "no_decode_step"})
Allocation = Literal["split", "vanilla", "speculative"]


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """What the router knows of a request before it runs.

    Attributes:
        task: classified task type.
        temperature: sampling temperature (0 = greedy).
        requested_route: the request's `route` extension field.
        unsupported_options: names of set options the speculative path refuses (e.g. "min_p").
        expected_tokens: E[τ] on the speculative path for this task and temperature, as the
            decision saw it (for its log line; None: not estimated).
        beyond_speculator_context: the prompt alone fills the speculator's context, so vLLM
            would not speculate for it.
        context_tokens: the mean context (tokens) one of its sequences holds while it decodes,
            prompt + half the output limit (`RequestParser.context_tokens`; 0: not estimated).
        no_decode_step: the output limit is one token (`max_tokens` / `max_completion_tokens`
            1): the prefill samples it and no decode step follows, so no draft is verified and the
            speculative engine would only add its drafter's passes.
    """

    task: TaskType
    temperature: float
    requested_route: RequestedRoute = "auto"
    unsupported_options: tuple[str, ...] = ()
    expected_tokens: float | None = None
    beyond_speculator_context: bool = False
    context_tokens: int = 0
    no_decode_step: bool = False

    @property
    def eligible_pools(self) -> tuple[Route, ...] | None:
        """The pools that may run it: ("vanilla",) when it sets an option the speculative path
        refuses, None when any pool may."""
        return ("vanilla",) if self.unsupported_options else None


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """A pool's load as the router sees it.

    Attributes:
        replicas: live replicas.
        in_flight: sequences in flight to it (prompts × n per request) from every ingress replica.
        available: it can take a request now (router/decider.py `PoolHealth`).
        asleep: it is scaled to zero (so not available) and starts a replica on demand.
        lossless_sampling: every replica's engine passed its sampling check at start: it samples
            the target's distribution at temperature > 0 (deployments/sampling_check.py).
        context_tokens: context tokens of the sequences in flight (`RequestFeatures
            .context_tokens` each; 0: not counted).
    """

    replicas: int
    in_flight: int
    available: bool = True
    asleep: bool = False
    lossless_sampling: bool = True
    context_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """The chosen path, why, and the expected speedup S of the speculative path for the request
    (None when not computed). S is told for a requested or pinned route too (what the request
    gains or gives up there), so that the mean predicted S of the requests the speculative pool
    serves covers the same requests as its realized TPOT (cluster/observability/panels.py).

    `eligible` names the pools the request may run on at all (None: any): a move to another
    pool (full, down, failed) must stay within it.
    """

    route: Route
    reason: Reason
    speedup: float | None = None
    eligible: tuple[Route, ...] | None = None

    def may_run_on(self, pool: Route) -> bool:
        """The request may run on `pool`."""
        return self.eligible is None or pool in self.eligible


class Unroutable(ValueError):
    """No configured pool may run the request (a 400 naming `param`)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def choose_route(req: RequestFeatures, pools: Mapping[Route, PoolLoad], cfg: RouterConfig,
                 previous: Route | None = None, speedup: float | None = None) -> RouteDecision:
    """Picks the path for one request.

    Args:
        req: the request's features.
        pools: load of each configured pool (a pool absent here is not configured).
        cfg: the router's settings.
        previous: the last automatic choice for this task type (for hysteresis).
        speedup: S of the speculative path for this request (`SpeedupModel.speedup`); None:
            not known yet (the rules decide).

    The pool the request would take is replaced, when it is not `available`, by another pool it
    may run on that is (reason `pool_unavailable`, or `pool_scaled_to_zero` when it is
    `asleep`), even for a request that asked for it: a dead pool would hold it. With no such
    pool the decision keeps the unavailable pool: the caller waits for it if it is asleep,
    else refuses (`refusal`).

    Raises:
        Unroutable: the request forces a pool that is not configured (param `route`), forces
            the speculative pool with an option it refuses (param: the option) or, sampled,
            while its sampling is not verified lossless (param `temperature`), or needs the
            vanilla pool where none is configured.
    """
    eligible = req.eligible_pools
    if req.requested_route != "auto" and req.requested_route not in pools:
        raise Unroutable("route", f"route: pool {req.requested_route!r} is not configured")
    if eligible is not None:
        option = req.unsupported_options[0]
        if req.requested_route not in ("auto", *eligible):
            raise Unroutable(option, f"{option}: not supported on the {req.requested_route} pool "
                             "(vLLM refuses it under speculative decoding); send route auto or "
                             "vanilla")
        if not any(p in pools for p in eligible):
            raise Unroutable(option, f"{option}: needs the vanilla pool (vLLM refuses it under "
                             "speculative decoding), which this deployment does not run")
    lossy = (req.temperature > 0 and "speculative" in pools
             and not pools["speculative"].lossless_sampling)
    if lossy:
        if req.requested_route == "speculative" or "vanilla" not in pools:
            raise Unroutable("temperature", "temperature: the speculative pool's engine is not "
                             "verified to sample the target's distribution at temperature > 0 "
                             "(see its replicas' startup log and /health); send temperature 0, "
                             "or route auto / vanilla")
        eligible = ("vanilla",)
    decision = _preferred_route(req, pools, cfg, previous, lossy, speedup)
    decision = RouteDecision(decision.route, decision.reason, decision.speedup, eligible)
    if pools[decision.route].available:
        return decision
    for pool, load in pools.items():
        if pool != decision.route and load.available and decision.may_run_on(pool):
            reason = "pool_scaled_to_zero" if pools[decision.route].asleep else "pool_unavailable"
            return RouteDecision(pool, reason, eligible=eligible)
    return decision


def _preferred_route(req: RequestFeatures, pools: Mapping[Route, PoolLoad], cfg: RouterConfig,
                     previous: Route | None, lossy: bool, speedup: float | None) -> RouteDecision:
    """The route `choose_route` picks when every pool is available."""
    if req.requested_route != "auto":  # S still told: what this request gains or gives up
        return RouteDecision(req.requested_route, "requested", speedup)
    if len(pools) == 1:
        return RouteDecision(next(iter(pools)), "only_pool")
    if req.unsupported_options:  # before the pin: the speculative pool would refuse it
        return RouteDecision("vanilla", "unsupported_option")
    if lossy:  # before the pin too: never a distribution other than the target's
        return RouteDecision("vanilla", "speculation_lossy")
    if cfg.pin != "auto":
        return RouteDecision(cfg.pin, "pinned", speedup)
    if req.beyond_speculator_context:
        return RouteDecision("vanilla", "beyond_speculator_context")
    if req.no_decode_step:
        return RouteDecision("vanilla", "no_decode_step")
    if req.temperature > cfg.max_speculative_temperature:
        return RouteDecision("vanilla", "high_temperature")
    if speedup is not None:
        threshold = cfg.min_speedup - (cfg.hysteresis if previous == "speculative" else 0.0)
        if speedup >= threshold:
            return RouteDecision("speculative", "speculation_pays", speedup)
        return RouteDecision("vanilla", "speculation_costs", speedup)
    if req.task not in cfg.speculative_tasks:
        return RouteDecision("vanilla", "task_gains_little")
    spec = pools["speculative"]
    if spec.in_flight >= cfg.max_speculative_in_flight * max(spec.replicas, 1):
        return RouteDecision("vanilla", "batch_pressure")
    return RouteDecision("speculative", "task_gains")


def has_room(load: PoolLoad, max_in_flight_per_replica: int, sequences: int = 1) -> bool:
    """The pool is available and takes `sequences` more within its bound:
    max_in_flight_per_replica × live replicas (`load.in_flight` counts sequences)."""
    bound = max_in_flight_per_replica * max(load.replicas, 1)
    return load.available and load.in_flight + sequences <= bound


def admit(decision: RouteDecision, pools: Mapping[Route, PoolLoad], max_in_flight_per_replica: int,
          sequences: int = 1) -> RouteDecision | None:
    """The decision to run a request of `sequences` sequences, possibly moved to another pool it
    may run on; None when nothing it may take has room (see `refusal`)."""
    if has_room(pools[decision.route], max_in_flight_per_replica, sequences):
        return decision
    if decision.reason == "requested":
        return None
    for pool, load in pools.items():
        if (pool != decision.route and decision.may_run_on(pool)
                and has_room(load, max_in_flight_per_replica, sequences)):
            return RouteDecision(pool, "pool_saturated", eligible=decision.eligible)
    return None


def refusal(decision: RouteDecision, pools: Mapping[Route, PoolLoad]) -> tuple[int, str]:
    """(HTTP status, message) for a request `admit` refused: 429 when a pool it may take is up
    but full, 503 when none is up. A forced pool (reason `requested`) counts alone."""
    candidates = [decision.route] if decision.reason == "requested" else [
        p for p in pools if decision.may_run_on(p)]
    one = len(candidates) == 1
    names = "The " + " and the ".join(f"{p} pool" for p in candidates)
    only = "" if decision.eligible is None else " (the only pool this request may run on)"
    if any(pools[p].available for p in candidates):
        return 429, f"{names} {'is' if one else 'are'} at the in-flight bound{only}; retry later"
    return 503, f"{names} {'has' if one else 'have'} no live replica{only}; retry later"


PricingMode = Literal["latency", "throughput"]


@dataclass
class SpeedupModel:
    """E[τ] per task and each pool's step-time model, learned online; S from them (abstract:
    `pool_step_s` prices the pools).

    Args:
        num_speculative_tokens: k, the speculative pool's configured draft length.
        max_num_seqs: each pool's engine running-batch cap (vLLM `max_num_seqs`), for its
            step-time model (requests beyond it wait).
        schedule: the speculative pool's `num_speculative_tokens_per_batch_size` (entries
            (first batch, last batch, γ)), or None (γ = k at every batch). With a table, E[τ] at
            a batch uses the first γ(B) positions' α (`core.specdecode.draft_tokens_at`); the
            step times need no change, since the engine already drafts γ(B) in the steps they
            are measured from.
    """

    num_speculative_tokens: int
    max_num_seqs: Mapping[str, int] = field(default_factory=dict)
    schedule: list[tuple[int, int, int]] | None = None
    acceptance: AcceptanceEstimator = None  # type: ignore[assignment]
    step_times: dict[str, StepTimeModel] = field(default_factory=dict)
    host_sharing: HostSharing = field(default_factory=HostSharing)
    # the step-time models hold each pool's step alone (`update_pools`); False: every sample as
    # measured (router.allocate_load off: the per-request rule exactly as before ρ was measured)
    alone_steps: bool = True
    # the newest samples folded, as `recent_samples` gives them (oldest first)
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_SAMPLES))
    _seen_samples: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.acceptance is None:
            self.acceptance = AcceptanceEstimator(self.num_speculative_tokens)

    def update_pools(self, pools: Mapping[str, PoolStats]) -> None:
        """Folds new step-time samples and profiles from a StatsBoard snapshot (each sample once).

        A sample is seconds per decode step as a request lives it at a count of requests in the
        replica's engine (`core.stats.busy_window_samples`), filed at that pool's own batch,
        and in `host_sharing` as taken while the other pool's engines had requests or not; the
        step-time model holds the pool's step alone, so a sample taken while the other pool was
        busy enters it divided by the pool's slowdown ρ once ρ is measured (unless
        `alone_steps` is off).
        """
        busy = {pool: stats.engine.num_requests_running + stats.engine.num_requests_waiting > 0
                for pool, stats in pools.items()}
        for pool, stats in pools.items():
            model = self.step_times.setdefault(
                pool, StepTimeModel(max_batch=self.max_num_seqs.get(pool)))
            model.fold(stats.profile, (), self._seen_samples, stats.profile_context)
            other_busy = any(b for other, b in busy.items() if other != pool)
            for replica, sample_id, batch, step_s in stats.step_samples:
                if self._seen_samples.get(replica) == sample_id:
                    continue
                self._seen_samples[replica] = sample_id
                self.host_sharing.observe(pool, batch, step_s, other_busy, stats.mean_context)
                # the model holds the pool's step time alone: a sample slowed by the other
                # pool's work is divided by the measured slowdown (ρ ≈ 1 on separate accelerators)
                rho = (self.host_sharing.slowdown(pool, batch)
                       if other_busy and self.alone_steps else None)
                folded = step_s / rho if rho else step_s
                model.observe(batch, folded, stats.mean_context)
                self.recent.append((time.time(), pool, replica, batch, step_s, other_busy, rho,
                                    folded, stats.mean_context))

    def recent_samples(self, since: float = 0.0) -> list[dict]:
        """The newest step-time samples folded (at most `RECENT_SAMPLES`, oldest first) taken
        after `since` (Unix seconds), each as `update_pools` filed it: {"time" (Unix s), "pool",
        "replica", "batch" (requests in the engine), "step_ms" (as measured), "other_busy",
        "slowdown" (ρ it was divided by, None: none), "folded_ms" (what entered the pool's
        step-time model before its context correction), "context" (mean tokens per sequence,
        None: unknown)}: what set each bucket of `GET /admin/speedup`'s step times."""
        keys = ("time", "pool", "replica", "batch", "step_ms", "other_busy", "slowdown",
                "folded_ms", "context")
        out = []
        for rec in self.recent:
            if rec[0] <= since:
                continue
            row = dict(zip(keys, rec))
            for key in ("step_ms", "folded_ms"):
                row[key] = round(1000 * row[key], 3)
            if row["slowdown"] is not None:
                row["slowdown"] = round(row["slowdown"], 4)
            out.append(row)
        return out

    def draft_tokens(self, batch: float | None) -> int:
        """γ the speculative engine drafts at `batch` requests per replica (k without a
        schedule or a batch)."""
        return draft_tokens_at(self.schedule, self.num_speculative_tokens, batch)

    def expected_tokens(self, task: TaskType, temperature: float, context_tokens: float = 0,
                        batch: float | None = None) -> float:
        """E[τ] for this task, temperature and context (tokens; 0: short) from the current
        per-position α (core/acceptance.py), over the γ the speculative engine drafts at
        `batch` requests per replica (`draft_tokens`; None: k)."""
        alphas = self.acceptance.alphas(task, temperature, context_tokens)
        return expected_tokens(alphas[:self.draft_tokens(batch)])

    def speculative_batch(self, loads: Mapping[Route, PoolLoad]) -> float | None:
        """Requests per replica the speculative pool would run with one more:
        (in flight + 1) / replicas (None: no speculative pool in `loads`)."""
        load = loads.get("speculative")
        return (load.in_flight + 1) / max(load.replicas, 1) if load else None

    def step_time(self, pool: Route, batch: float, context: float | None = None
                  ) -> float | None:
        """Predicted seconds per engine step of `pool` with `batch` requests per replica at a
        mean `context` tokens per sequence (None: the profile's) (None: unknown)."""
        model = self.step_times.get(pool)
        return model.step_time(batch, context) if model else None

    def pool_step_s(self, loads: Mapping[Route, PoolLoad], context_tokens: int = 0
                    ) -> dict[Route, float | None]:
        """Each pool's cost of one more sequence-step in seconds (None: unknown; `math.inf`:
        one more adds nothing), for a sequence of `context_tokens` mean context (0: unknown)."""
        raise NotImplementedError

    def speedup(self, features: RequestFeatures, loads: Mapping[Route, PoolLoad]) -> float | None:
        """S of sending this request speculative given both pools' loads; None until both pools
        have a step time (or when one pool is not configured)."""
        cost = self.pool_step_s(loads, features.context_tokens)
        vanilla, speculative = cost.get("vanilla"), cost.get("speculative")
        if not vanilla or not speculative:
            return None
        e_tau = features.expected_tokens  # as the decider already estimated it
        if e_tau is None:
            e_tau = self.expected_tokens(features.task, features.temperature,
                                         features.context_tokens, self.speculative_batch(loads))
        return batched_speedup(e_tau, vanilla, speculative)

    def latency_step_s(self, loads: Mapping[Route, PoolLoad], context_tokens: int = 0
                       ) -> dict[Route, float | None]:
        """T(B + 1, L) of each pool: its step time at its own in-flight + 1 per replica, at the
        mean context of its sequences in flight and this one (`context_tokens`; those not
        counted: the profile's)."""
        out = {}
        for pool, load in loads.items():
            context = None
            if context_tokens > 0:
                counted = load.context_tokens if load.context_tokens > 0 else None
                context = ((counted + context_tokens) / (load.in_flight + 1) if counted
                           else context_tokens)
            out[pool] = self.step_time(pool, (load.in_flight + 1) / max(load.replicas, 1),
                                       context)
        return out

    def curve(self, task: TaskType, temperature: float, context: float | None = None
              ) -> list[dict]:
        """S(B) = E[τ] · T_v(B, L) / T_s(B, L) at every batch either pool has a step time for:
        the S a latency-priced request gets when both pools would run batch B at a mean context of
        `context` tokens per sequence (None: each pool's profile context), for operators and
        reports.

        Returns:
            Rows {"batch", "vanilla_step_ms", "speculative_step_ms", "expected_tokens",
            "speedup"} (E[τ] over the γ drafted at that batch); empty until both pools are
            known.
        """
        van, spec = self.step_times.get("vanilla"), self.step_times.get("speculative")
        if van is None or spec is None or not van.points() or not spec.points():
            return []
        rows = []
        for batch in sorted(set(van.points()) | set(spec.points())):
            t_v, t_s = van.step_time(batch, context), spec.step_time(batch, context)
            e_tau = self.expected_tokens(task, temperature, context or 0, batch)
            rows.append({"batch": batch, "vanilla_step_ms": round(1000 * t_v, 3),
                         "speculative_step_ms": round(1000 * t_s, 3),
                         "expected_tokens": round(e_tau, 3),
                         "speedup": round(batched_speedup(e_tau, t_v, t_s), 3)})
        return rows


class LatencySpeedup(SpeedupModel):
    """Prices a request by the step time it would live: c = T(B + 1, L) (module docstring)."""

    def pool_step_s(self, loads: Mapping[Route, PoolLoad], context_tokens: int = 0
                    ) -> dict[Route, float | None]:
        return self.latency_step_s(loads, context_tokens)


class ThroughputSpeedup(SpeedupModel):
    """Prices a batch row by the throughput it adds: c = 1 / ΔR (module docstring); when both
    pools are saturated (ΔR = 0 on each), by T(B + 1) as `LatencySpeedup`."""

    def pool_step_s(self, loads: Mapping[Route, PoolLoad], context_tokens: int = 0
                    ) -> dict[Route, float | None]:
        marginal = {}
        for pool, load in loads.items():
            model = self.step_times.get(pool)
            marginal[pool] = marginal_step_s(model.points() if model else {}, load.in_flight,
                                             load.replicas, self.max_num_seqs.get(pool, 1 << 30))
        if all(m == math.inf for m in marginal.values()):
            return self.latency_step_s(loads, context_tokens)
        return marginal


SPEEDUP_MODELS: dict[PricingMode, type[SpeedupModel]] = {"latency": LatencySpeedup,
                                                         "throughput": ThroughputSpeedup}


def marginal_step_s(points: Mapping[float, float], in_flight: int, replicas: int,
                    max_num_seqs: int) -> float | None:
    """1 / ΔR: seconds per sequence-step that one more sequence adds to a pool's throughput.

    R(n) is known at the profiled batches only, and noisily (a busy machine makes some steps slow
    at random); a difference of two noisy rates could swing the decision either way. So ΔR is the
    slope of the least concave majorant of the known points (0, 0), (n_i, R(n_i)): throughput
    with diminishing returns, never a negative or exploding gain inside the measured range. Beyond
    the largest known batch the last slope continues.

    Args:
        points: {per-replica running batch: seconds per engine step} known for the pool
            (`core.StepTimeModel.points()`).
        in_flight: sequences the pool holds now (running or queued).
        replicas: live replicas.
        max_num_seqs: running-batch cap per replica (a sequence beyond it queues: no gain).

    Returns:
        None before any step time is known; `math.inf` when one more adds nothing.
    """
    replicas = max(replicas, 1)
    curve = [(0.0, 0.0)] + [(b * replicas, b * replicas / step_s)
                            for b, step_s in sorted(points.items()) if b <= max_num_seqs]
    if len(curve) == 1:
        return None
    if in_flight + 1 > max_num_seqs * replicas:
        return math.inf
    hull: list[tuple[float, float]] = []
    for p in curve:  # upper hull, points sorted by batch
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()
        hull.append(p)
    segments = list(zip(hull, hull[1:]))
    (x0, y0), (x1, y1) = next((seg for seg in segments if in_flight < seg[1][0]), segments[-1])
    gain = (y1 - y0) / (x1 - x0)
    return 1.0 / gain if gain > 0 else math.inf


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    """> 0 when `a` lies below the line from `o` to `b`."""
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


@dataclass
class LoadMix:
    """The recent automatically routed traffic as the per-request rule would split it: decayed,
    token-weighted sums over requests (each request's sums decay by `1 − weight` per new one,
    so the mix follows the last ~1 / weight requests).

    Attributes:
        weight: share of the newest request in the sums (0..1].
    """

    weight: float = 0.05
    _tokens: float = 0.0  # output tokens asked for, all requests
    _steps: float = 0.0  # their speculative verification steps: tokens / E[τ]
    _spec_tokens: float = 0.0  # of those the per-request rule sends speculative
    _spec_steps: float = 0.0

    def observe(self, tokens: float, e_tau: float, speculative: bool) -> None:
        """One request: `tokens` output tokens (max_tokens × sequences), its E[τ] on the
        speculative pool, and whether the per-request rule sends it there."""
        keep = 1.0 - self.weight
        steps = tokens / max(e_tau, 1.0)
        self._tokens = self._tokens * keep + tokens
        self._steps = self._steps * keep + steps
        self._spec_tokens = self._spec_tokens * keep + (tokens if speculative else 0.0)
        self._spec_steps = self._spec_steps * keep + (steps if speculative else 0.0)

    @property
    def known(self) -> bool:
        return self._tokens > 0

    @property
    def speculative_share(self) -> float:
        """Share of the tokens the per-request rule sends speculative (0 before any)."""
        return self._spec_tokens / self._tokens if self._tokens else 0.0

    @property
    def expected_tokens(self) -> float:
        """E[τ] of the whole mix on the speculative pool: tokens / verification steps (the
        token-weighted harmonic mean of the requests' E[τ]); 1 before any."""
        return self._tokens / self._steps if self._steps else 1.0

    @property
    def speculative_expected_tokens(self) -> float:
        """E[τ] of the part the per-request rule sends speculative (1 before any)."""
        return self._spec_tokens / self._spec_steps if self._spec_steps else 1.0


def allocate(model: SpeedupModel, mix: LoadMix, loads: Mapping[Route, PoolLoad],
             current: Allocation = "split", margin: float = 0.05
             ) -> tuple[Allocation, dict[Allocation, float]]:
    """Where the load should run when the pools may slow each other: split by request (the
    per-request rule), or all of it on one pool.

    With n = the sequences in flight on both pools plus one, the machine's decode rate in tokens
    per second is predicted for three allocations from each pool's step time T(B) at its
    per-replica batch (`SpeedupModel.step_time`) and the mix (`LoadMix`):

    - vanilla: n / T_v(n / r_v);
    - speculative: n · E_mix / T_s(n / r_s);
    - split: the per-request rule's share f of the sequences goes speculative, n_s = f · n,
      n_v = n − n_s: n_v / (ρ'_v · T_v(n_v / r_v)) + n_s · E_f / (ρ'_s · T_s(n_s / r_s)), where
      ρ'_p = 1 + (ρ_p − 1) · P(both pools busy), P = 1 − f^n − (1 − f)^n, and ρ_p each pool's
      measured slowdown at its batch while the other is busy (`core.step_time.HostSharing`; a
      pool not yet measured takes the other's).

    E_mix and E_f are the mix's E[τ] as each request was priced (at the speculative pool's batch
    then): under a `num_speculative_tokens_per_batch_size` table they are not re-evaluated at the
    batch an allocation would run.

    On separate accelerators ρ ≈ 1 and splitting keeps both at work, so split wins unless one
    pool alone is faster; on a shared host where two busy engines make less than one (ρ ≈ 2 on
    our 2-core box with the tiny target) one pool wins. The current allocation is kept unless
    another predicts more than `margin` (a share) above it, so the choice does not flap.

    Returns:
        (allocation, {allocation: predicted tokens per second}); ("split", {}) until ρ, the mix
        and both pools' step times are known (the per-request rule alone, as before any
        measurement).
    """
    sharing = model.host_sharing
    if (not sharing.slowdowns() or not mix.known or "vanilla" not in loads
            or "speculative" not in loads
            or not all(model.step_time(p, 1) for p in ("vanilla", "speculative"))):
        return "split", {}
    van, spec = loads["vanilla"], loads["speculative"]
    r_v, r_s = max(van.replicas, 1), max(spec.replicas, 1)
    n = van.in_flight + spec.in_flight + 1
    f = mix.speculative_share
    n_s, n_v = f * n, (1.0 - f) * n
    rho_v = sharing.slowdown("vanilla", n_v / r_v) or sharing.slowdown("speculative", n_s / r_s)
    rho_s = sharing.slowdown("speculative", n_s / r_s) or rho_v
    both = 1.0 - f ** n - (1.0 - f) ** n
    rates: dict[Allocation, float] = {
        "vanilla": n / model.step_time("vanilla", n / r_v),
        "speculative": n * mix.expected_tokens / model.step_time("speculative", n / r_s),
        "split": (n_v / ((1 + (rho_v - 1) * both) * model.step_time("vanilla", n_v / r_v))
                  + n_s * mix.speculative_expected_tokens
                  / ((1 + (rho_s - 1) * both) * model.step_time("speculative", n_s / r_s)))}
    best = max(rates, key=rates.get)
    if current in rates and rates[best] <= rates[current] * (1.0 + margin):
        best = current
    return best, rates
