"""Admission control at the ingress: each pool holds at most `max_in_flight_per_replica` sequences
per live replica (running in its engine or queued before it), so queues and memory stay bounded
under any load. A request counts as the sequences it starts (prompts × n,
`router.validation.request_sequences`): one request of 8 sequences occupies 8.

A request whose pool is full moves to the other pool when the router chose the pool itself
(reason `pool_saturated`); when both are full, or the client forced a full pool, it gets 429 with
`Retry-After` and never reaches a pool.
"""

from __future__ import annotations

from typing import Mapping

from cluster.config import Route
from router.policy import Decision, PoolLoad


def has_room(load: PoolLoad, max_in_flight_per_replica: int, sequences: int = 1) -> bool:
    """The pool is available and takes `sequences` more within its bound:
    max_in_flight_per_replica × live replicas (`load.in_flight` counts sequences)."""
    bound = max_in_flight_per_replica * max(load.replicas, 1)
    return load.available and load.in_flight + sequences <= bound


def admit(decision: Decision, pools: Mapping[Route, PoolLoad], max_in_flight_per_replica: int,
          sequences: int = 1) -> Decision | None:
    """The decision to run a request of `sequences` sequences, possibly moved to the other pool;
    None when nothing has room (429)."""
    if has_room(pools[decision.route], max_in_flight_per_replica, sequences):
        return decision
    if decision.reason == "requested":
        return None
    for pool, load in pools.items():
        if pool != decision.route and has_room(load, max_in_flight_per_replica, sequences):
            return Decision(pool, "pool_saturated")
    return None
