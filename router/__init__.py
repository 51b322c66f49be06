"""The router: the OpenAI-compatible ingress and the per-request route decision.

One request, in order: `ingress` (HTTP, the Serve deployment and its builder) → `decider`
(`RouteDecider.parse`, then `RouteDecider.route` → `Routed`, with each pool's load and health) →
`request` + `classify` (the body read once: validation, task, sequences) → `policy` (S, priced by
latency or throughput, and the pure `choose_route` and `admit`). Around it: `auth`, `body_limit`,
`errors`, `streaming` (relaying the pool's response, and its failures), `metrics`, `wake`,
`admin`, `board` (the StatsBoard actor).

The package imports none of its modules, so `import router.policy` does not import the HTTP stack.
"""
