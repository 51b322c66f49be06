"""The per-request route decision, a pure function: `choose_route(request, pools, config)`.

First cut: speculation pays while the speculative pool's batch is small (memory-bound decode) and
the task accepts many draft tokens; it costs at large batch and high temperature (vLLM drafts
greedily, so acceptance falls as temperature rises). Every decision carries its reason, which the
ingress returns in `x-specserve-reason` and counts in `specserve_requests_total`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from cluster.config import Route, RouterConfig, TaskType

RequestedRoute = Literal["auto", "speculative", "vanilla"]
Reason = Literal[
    "requested",              # the request's `route` field forced the path
    "pinned",                 # router.pin in the config forced the path
    "only_pool",              # the other pool is not configured
    "unsupported_option",     # min_p / logit_bias: vLLM refuses them under speculative decoding
    "high_temperature",       # above router.max_speculative_temperature
    "task_gains_little",      # task type not in router.speculative_tasks
    "batch_pressure",         # speculative pool at its in-flight cap per replica
    "task_gains",             # speculative: task accepts many draft tokens and the pool has room
]


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """What the router knows of a request before it runs.

    Attributes:
        task: classified task type.
        temperature: sampling temperature (0 = greedy).
        requested_route: the request's `route` extension field.
        unsupported_options: names of set options the speculative path refuses (e.g. "min_p").
    """

    task: TaskType
    temperature: float
    requested_route: RequestedRoute = "auto"
    unsupported_options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """A pool's load as the router sees it: live replicas and requests in flight to it
    from every ingress replica."""

    replicas: int
    in_flight: int


@dataclass(frozen=True, slots=True)
class Decision:
    route: Route
    reason: Reason


def choose_route(req: RequestFeatures, pools: Mapping[Route, PoolLoad],
                 cfg: RouterConfig) -> Decision:
    """Picks the path for one request.

    Args:
        req: the request's features.
        pools: load of each configured pool (a pool absent here is not configured).
        cfg: the router's settings.

    Raises:
        ValueError: the request forces a pool that is not configured.
    """
    if req.requested_route != "auto":
        if req.requested_route not in pools:
            raise ValueError(f"route: pool {req.requested_route!r} is not configured")
        return Decision(req.requested_route, "requested")
    if len(pools) == 1:
        return Decision(next(iter(pools)), "only_pool")
    if cfg.pin != "auto":
        return Decision(cfg.pin, "pinned")
    if req.unsupported_options:
        return Decision("vanilla", "unsupported_option")
    if req.temperature > cfg.max_speculative_temperature:
        return Decision("vanilla", "high_temperature")
    if req.task not in cfg.speculative_tasks:
        return Decision("vanilla", "task_gains_little")
    spec = pools["speculative"]
    if spec.in_flight >= cfg.max_speculative_in_flight * max(spec.replicas, 1):
        return Decision("vanilla", "batch_pressure")
    return Decision("speculative", "task_gains")
