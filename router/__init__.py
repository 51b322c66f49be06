"""The router: the OpenAI-compatible ingress and the per-request route decision.

One request, in order: `ingress` (HTTP, the Serve deployment and its builder) → `decider` (the one
decision object: `RouteDecider`) → `features` + `classify` (what the request is) → `pool_view`
(each pool's load and health) → `speedup` (S, priced by latency or throughput) → `policy` (the
pure `choose_route` and `admit`). Around it: `auth`, `body_limit`, `validation`, `errors`,
`streaming`, `metrics`, `wake`, `admin`.

Names are loaded on first use, so `import router.policy` does not import the HTTP stack.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "build_ingress": "router.ingress", "SpecserveIngress": "router.ingress",
    "RouteDecider": "router.decider", "route_headers": "router.decider",
    "choose_route": "router.policy", "admit": "router.policy", "refusal": "router.policy",
    "Decision": "router.policy", "PoolLoad": "router.policy", "RequestFeatures": "router.policy",
    "Unroutable": "router.policy",
    "SpeedupModel": "router.speedup", "LatencySpeedup": "router.speedup",
    "ThroughputSpeedup": "router.speedup", "SPEEDUP_MODELS": "router.speedup",
    "PoolHealth": "router.pool_view", "PressureTracker": "router.pool_view",
    "classify_text": "router.classify", "RequestError": "router.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'router' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
