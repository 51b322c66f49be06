"""The per-request route decision, a pure function: `choose_route(request, pools, config)`.

With measured step times, the router compares what one more sequence gets on each path: on the
speculative pool E[τ] tokens per step of T_s(B_s + 1) seconds, on the vanilla pool one token per
T_v(B_v + 1) seconds, so the expected speedup of sending it speculative is

    S = E[τ] · T_v(B_v + 1) / T_s(B_s + 1)

which is the batched form S(B) = E[τ]·T_t(B,1) / (γ·T_d(B) + T_t(B,γ+1)) (Leviathan et al. 2023)
evaluated at the batch each pool would run. It goes speculative when S ≥ `min_speedup`, and stays
there while S ≥ `min_speedup − hysteresis` (no flapping around the threshold). Before any step time
is known it falls back to rules: the task's type and the speculative pool's in-flight cap.
Every decision carries its reason, returned in `x-specserve-reason` and counted in metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from cluster.config import Route, RouterConfig, TaskType

RequestedRoute = Literal["auto", "speculative", "vanilla"]
Reason = Literal[
    "requested",              # the request's `route` field forced the path
    "pool_unavailable",       # the other pool has no live replica (router/health.py)
    "pool_saturated",         # the chosen pool is at its in-flight bound (router/admission.py)
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
        expected_tokens: E[τ] on the speculative path for this task and temperature (None:
            unknown).
        beyond_speculator_context: the prompt alone fills the speculator's context, so vLLM
            would not speculate for it.
    """

    task: TaskType
    temperature: float
    requested_route: RequestedRoute = "auto"
    unsupported_options: tuple[str, ...] = ()
    expected_tokens: float | None = None
    beyond_speculator_context: bool = False


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """A pool's load as the router sees it.

    Attributes:
        replicas: live replicas.
        in_flight: sequences in flight to it (prompts × n per request) from every ingress replica.
        step_s: predicted seconds per engine step at the per-replica batch it would run with this
            request, (in_flight + 1) / replicas; None until profiled or sampled.
        available: it can take a request now (router/health.py).
        lossless_sampling: every replica's engine passed its sampling check at start: it samples
            the target's distribution at temperature > 0 (deployments/sampling_check.py).
    """

    replicas: int
    in_flight: int
    step_s: float | None = None
    available: bool = True
    lossless_sampling: bool = True


class LossySampling(ValueError):
    """A sampled request forced onto a speculative pool whose sampling is not verified lossless
    (400, `param` temperature): specserve never serves a distribution other than the target's."""

    param = "temperature"


@dataclass(frozen=True, slots=True)
class Decision:
    """The chosen path, why, and the expected speedup S behind it (None when not computed)."""

    route: Route
    reason: Reason
    speedup: float | None = None


def choose_route(req: RequestFeatures, pools: Mapping[Route, PoolLoad], cfg: RouterConfig,
                 previous: Route | None = None) -> Decision:
    """Picks the path for one request.

    Args:
        req: the request's features.
        pools: load of each configured pool (a pool absent here is not configured).
        cfg: the router's settings.
        previous: the last automatic choice for this task type (for hysteresis).

    A pool that is not `available` gets nothing while the other one is (reason
    `pool_unavailable`, even for a request that asked for it: a dead pool would hold it).

    A sampled request (temperature > 0) never goes to a speculative pool whose sampling is not
    verified lossless: `auto` goes vanilla (`speculation_lossy`), a forced one is refused.

    Raises:
        ValueError: the request forces a pool that is not configured.
        LossySampling: the request forces the speculative path at temperature > 0 and the
            speculative pool's sampling is not verified lossless.
    """
    lossy = (req.temperature > 0 and "speculative" in pools
             and not pools["speculative"].lossless_sampling)
    fallback = {p: other for p in pools for other in pools
                if other != p and not pools[p].available and pools[other].available}
    if req.requested_route != "auto":
        if req.requested_route not in pools:
            raise ValueError(f"route: pool {req.requested_route!r} is not configured")
        if req.requested_route in fallback:
            return Decision(fallback[req.requested_route], "pool_unavailable")
        if req.requested_route == "speculative" and lossy:
            raise LossySampling(
                "temperature: the speculative pool's engine is not verified to sample the "
                "target's distribution at temperature > 0 (see its replicas' startup log); send "
                "temperature 0, or route auto / vanilla")
        return Decision(req.requested_route, "requested")
    if len(pools) == 1:
        return Decision(next(iter(pools)), "only_pool")
    if fallback:
        return Decision(next(iter(fallback.values())), "pool_unavailable")
    if lossy:
        return Decision("vanilla", "speculation_lossy")
    if cfg.pin != "auto":
        return Decision(cfg.pin, "pinned")
    if req.unsupported_options:
        return Decision("vanilla", "unsupported_option")
    if req.beyond_speculator_context:
        return Decision("vanilla", "beyond_speculator_context")
    if req.temperature > cfg.max_speculative_temperature:
        return Decision("vanilla", "high_temperature")
    spec, van = pools["speculative"], pools["vanilla"]
    if req.expected_tokens is not None and spec.step_s and van.step_s:
        speedup = req.expected_tokens * van.step_s / spec.step_s
        threshold = cfg.min_speedup - (cfg.hysteresis if previous == "speculative" else 0.0)
        if speedup >= threshold:
            return Decision("speculative", "speculation_pays", speedup)
        return Decision("vanilla", "speculation_costs", speedup)
    if req.task not in cfg.speculative_tasks:
        return Decision("vanilla", "task_gains_little")
    if spec.in_flight >= cfg.max_speculative_in_flight * max(spec.replicas, 1):
        return Decision("vanilla", "batch_pressure")
    return Decision("speculative", "task_gains")
