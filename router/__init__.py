"""The router: the OpenAI-compatible ingress and the per-request route decision.

One request, in order: `ingress` (HTTP, the Serve deployment and its builder) → `decider` (the one
decision object: `RouteDecider`) → `features` + `classify` (what the request is) → `pool_view`
(each pool's load and health) → `speedup` (S, priced by latency or throughput) → `policy` (the
pure `choose_route` and `admit`). Around it: `auth`, `body_limit`, `validation`, `errors`,
`streaming`, `metrics`, `wake`, `admin`.

The package imports none of its modules, so `import router.policy` does not import the HTTP stack.
"""
