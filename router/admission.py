"""Admission control at the ingress: each pool holds at most `max_in_flight_per_replica` sequences
per live replica (running in its engine or queued before it), so queues and memory stay bounded
under any load. A request counts as the sequences it starts (prompts × n,
`router.validation.request_sequences`): one request of 8 sequences occupies 8.

A request whose pool is full moves to the other pool when the router chose the pool itself
and the request may run there (reason `pool_saturated`; `Decision.eligible`: `min_p` and
`logit_bias` never move to the speculative pool); when no pool it may take has room, it gets 429
with `Retry-After` (503 when none of them is up) and never reaches a pool.
"""

from __future__ import annotations

from typing import Mapping

from core import Route
from router.policy import Decision, PoolLoad


def has_room(load: PoolLoad, max_in_flight_per_replica: int, sequences: int = 1) -> bool:
    """The pool is available and takes `sequences` more within its bound:
    max_in_flight_per_replica × live replicas (`load.in_flight` counts sequences)."""
    bound = max_in_flight_per_replica * max(load.replicas, 1)
    return load.available and load.in_flight + sequences <= bound


def admit(decision: Decision, pools: Mapping[Route, PoolLoad], max_in_flight_per_replica: int,
          sequences: int = 1) -> Decision | None:
    """The decision to run a request of `sequences` sequences, possibly moved to another pool it
    may run on; None when nothing it may take has room (see `refusal`)."""
    if has_room(pools[decision.route], max_in_flight_per_replica, sequences):
        return decision
    if decision.reason == "requested":
        return None
    for pool, load in pools.items():
        if (pool != decision.route and decision.may_run_on(pool)
                and has_room(load, max_in_flight_per_replica, sequences)):
            return Decision(pool, "pool_saturated", eligible=decision.eligible)
    return None


def refusal(decision: Decision, pools: Mapping[Route, PoolLoad]) -> tuple[int, str]:
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
