"""The per-request route decision and admission, pure functions:
`choose_route(request, pools, config, previous, speedup)` and `admit(decision, pools, ...)`.

Given the expected speedup S of the speculative path for this request (router/speedup.py: the
ingress prices a request by its latency, a batch job by the throughput a row adds), the request
goes speculative when S ≥ `min_speedup`, and stays there while S ≥ `min_speedup − hysteresis` (no
flapping around the threshold). Before any step time is known (S is None) it falls back to rules:
the task's type and the speculative pool's in-flight cap. Every decision carries its reason,
returned in `x-specserve-reason` and counted in metrics.

Admission: each pool holds at most `max_in_flight_per_replica` sequences per live replica (running
in its engine or queued before it), so queues and memory stay bounded under any load. A request
counts as the sequences it starts (prompts × n, `router.validation.request_sequences`). A request
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from core import RequestedRoute, Route, RouterConfig, TaskType

Reason = Literal[
    "requested",              # the request's `route` field forced the path
    "pool_unavailable",       # the chosen pool has no live replica (router/pool_view.py)
    "pool_scaled_to_zero",    # the pool it wanted is scaled to zero: woken; went elsewhere
    "pool_saturated",         # the chosen pool is at its in-flight bound (`admit`)
    "pinned",                 # router.pin in the config forced the path
    "only_pool",              # the other pool is not configured
    "unsupported_option",     # min_p / logit_bias: vLLM refuses them under speculative decoding
    "speculation_lossy",      # sampled (T > 0), and the speculative pool's sampling is not
                              # verified lossless (deployments/sampling_check.py)
    "beyond_speculator_context",  # prompt longer than the speculator's context: nothing to gain
    "high_temperature",       # above router.max_speculative_temperature
    "task_gains_little",      # task type not in router.speculative_tasks
    "batch_pressure",         # no step times yet; speculative pool at its in-flight cap
    "task_gains",             # no step times yet; task accepts many draft tokens, pool has room
    "speculation_pays",       # S ≥ threshold: speculative
    "speculation_costs",      # S < threshold: vanilla
]


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
    """

    task: TaskType
    temperature: float
    requested_route: RequestedRoute = "auto"
    unsupported_options: tuple[str, ...] = ()
    expected_tokens: float | None = None
    beyond_speculator_context: bool = False

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
        available: it can take a request now (router/pool_view.py `PoolHealth`).
        asleep: it is scaled to zero (so not available) and starts a replica on demand.
        lossless_sampling: every replica's engine passed its sampling check at start: it samples
            the target's distribution at temperature > 0 (deployments/sampling_check.py).
    """

    replicas: int
    in_flight: int
    available: bool = True
    asleep: bool = False
    lossless_sampling: bool = True


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
