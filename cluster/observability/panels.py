"""Every panel of the specserve dashboard with the PromQL behind it: one catalog that the Grafana
dashboard (dashboard.py), the PNG renders (png.py) and the real-Prometheus test all read.

Series come from three exporters, with the same names on CPU and GPU:

- `specserve_*`: the ingress's `GET /metrics` (router/metrics.py): decisions, the router's
  estimates, and each pool's engine figures summed over its replicas, labelled `pool`;
- `ray_vllm_*`: vLLM's own metrics through Ray's metrics export (deployments/engine_metrics.py),
  labelled with the Serve `deployment` (the pool) besides vLLM's labels;
- `ray_serve_*`, `ray_specserve_*`: Ray Serve's metrics and the autoscaling policy's
  (autoscaling/controller.py), through Ray's metrics export, labelled `deployment` / `pool`.

Expressions use Grafana's `$__rate_interval` and the dashboard variable `$task`;
`evaluable(expr, window)` substitutes both for a plain Prometheus query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

from core import Route
from cluster.observability.promql import RATE, mean, quantiles, rate, ratio_by

POOLS_RE = "|".join(sorted(get_args(Route)))
REJECTED = "rejected_overload"  # the decision reason of a 429 (router/ingress.py)
ROUTED = f'reason!="{REJECTED}"'  # decisions that reached a pool
REFUSED = f'reason="{REJECTED}"'
OPENAI = 'route=~"/v1/.*"'  # Serve's proxy labels requests by path: not /metrics, /health


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target of a panel.

    Attributes:
        expr: the expression, with `$__rate_interval` / `$task` where Grafana substitutes them.
        legend: Grafana's legend format (`{{label}}` for a label's value).
    """

    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    """A time-series panel.

    Attributes:
        key: short stable name (PNG file names, test ids).
        title: the panel's title.
        description: what it shows and how to read it (Grafana's panel info).
        unit: Grafana unit id (`reqps`, `s`, `percentunit`, `short`, `none`).
        queries: its targets, drawn together.
        stack: stack the series (shares of one total).
        bars: draw bars (counts per interval) instead of lines.
        main: one of the panels `specserve observability png` renders.
        autoscaled: its series exist only where the autoscaling policy runs
            (`autoscaling.enabled`: the application deployed with its `autoscaling_policy`).
    """

    key: str
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    stack: bool = False
    bars: bool = False
    main: bool = False
    autoscaled: bool = False


@dataclass(frozen=True, slots=True)
class Row:
    """A dashboard row: a title over panels laid out two per line."""

    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def _quantiles(histogram: str) -> tuple[Query, ...]:
    return tuple(Query(expr, legend) for expr, legend in quantiles(histogram))


TPOT = "ray_vllm_request_time_per_output_token_seconds"

ROWS: tuple[Row, ...] = (
    Row("Routing", (
        Panel("route_mix", "Route mix", "Requests routed per second, by pool (429s excluded).",
              "reqps", (Query(f"sum by (route) ({rate('specserve_requests_total', ROUTED)})",
                              "{{route}}"),), stack=True),
        Panel("route_reasons", "Route reasons", "Decisions per second by pool and reason "
              "(router/policy.py; every reason the router emits, none listed here).", "reqps",
              (Query(f"sum by (route, reason) ({rate('specserve_requests_total')})",
                     "{{route}} · {{reason}}"),), stack=True, main=True),
        Panel("route_by_task", "Routes by task type", "Requests per second by task type and the "
              "pool they went to (429s excluded).", "reqps",
              (Query(f"sum by (task, route) ({rate('specserve_requests_total', ROUTED)})",
                     "{{task}} → {{route}}"),), stack=True),
    )),
    Row("Speculation: predicted and realized", (
        Panel("speedup", "Speedup S: predicted vs realized",
              "Predicted: mean S the router expected for the requests the speculative pool "
              "served (its own choices, requested and pinned routes). Realized: mean time per "
              "output token of the vanilla pool over the "
              "speculative pool's, in the same window (each at its own load).", "none",
              (Query(mean("specserve_expected_speedup", 'route="speculative"'),
                     "predicted (requests sent speculative)"),
               Query(mean(TPOT, 'deployment="vanilla"') + " / "
                     + mean(TPOT, 'deployment="speculative"'),
                     "realized (TPOT vanilla / TPOT speculative)")), main=True),
        Panel("tokens_per_step", "Tokens per step per pool",
              "Output tokens per engine output of a request (first token + one per decode or "
              "verification step): 1 on the vanilla pool, E[τ] on the speculative one; and the "
              "speculative engine's own 1 + accepted / drafts.", "none",
              (Query(f"sum by (deployment) ({rate('ray_vllm_generation_tokens_total')}) / "
                     f"(sum by (deployment) ({rate('ray_vllm_time_to_first_token_seconds_count')})"
                     f" + sum by (deployment) "
                     f"({rate('ray_vllm_inter_token_latency_seconds_count')}))",
                     "{{deployment}}: tokens per output"),
               Query("1 + " + ratio_by("specserve_spec_decode_num_accepted_tokens_total",
                                              "specserve_spec_decode_num_drafts_total"),
                     "{{pool}}: 1 + accepted / drafts (engine)"))),
        Panel("acceptance_length", "Mean acceptance length E[τ] per task, temperature and "
              "context",
              "The router's online estimate (core/acceptance.py), tokens per verification "
              "step, bonus token included: what its speedup predictions use.", "none",
              (Query('specserve_mean_acceptance_length{task=~"$task"}',
                     "{{task}} · {{temperature}} · {{context}}"),), main=True),
        Panel("acceptance_alpha", "Per-position acceptance α_i per task and temperature",
              "The router's estimate of P(draft token i accepted | tokens before it accepted).",
              "percentunit", (Query('specserve_acceptance_alpha{task=~"$task"}',
                                    "{{task}} · {{temperature}} · {{context}} · α{{position}}"),)),
        Panel("acceptance_by_position", "Engine acceptance by draft position",
              "Share of verification steps whose draft position i was accepted (vLLM's "
              "per-position counters over its drafts: Π α_j up to i).", "percentunit",
              (Query(f"sum by (pool, position) "
                     f"({rate('specserve_spec_decode_num_accepted_tokens_per_pos_total')}) / on "
                     f"(pool) group_left () (sum by (pool) "
                     f"({rate('specserve_spec_decode_num_drafts_total')}) > 0)",
                     "{{pool}} position {{position}}"),)),
        Panel("acceptance_rate", "Acceptance rate per pool",
              "Accepted / proposed draft tokens (vLLM's \"acceptance rate\"; not α).",
              "percentunit",
              (Query(ratio_by("specserve_spec_decode_num_accepted_tokens_total",
                                     "specserve_spec_decode_num_draft_tokens_total"),
                     "{{pool}}"),)),
    )),
    Row("Pools", (
        Panel("load", "Running, waiting and in flight per pool",
              "Engine running batch and queue (summed over the pool's replicas) and the "
              "requests the ingress has in flight to the pool.", "short",
              (Query("specserve_pool_num_requests_running", "{{pool}} running"),
               Query("specserve_pool_num_requests_waiting", "{{pool}} waiting"),
               Query("specserve_pool_in_flight", "{{pool}} in flight")), main=True),
        Panel("kv_cache", "KV-cache use per pool", "Fraction of KV blocks in use (the fullest "
              "replica of the pool).", "percentunit",
              (Query("specserve_pool_kv_cache_usage", "{{pool}}"),)),
        Panel("ttft", "Time to first token p50 / p99", "vLLM's TTFT per pool (engine time).",
              "s", _quantiles("ray_vllm_time_to_first_token_seconds"), main=True),
        Panel("tpot", "Time per output token p50 / p99", "vLLM's per-request decode time over "
              "its output tokens (speculation lowers it).", "s", _quantiles(TPOT)),
        Panel("itl", "Inter-token latency p50 / p99", "vLLM's time between two outputs of a "
              "request (a speculative output carries several tokens).", "s",
              _quantiles("ray_vllm_inter_token_latency_seconds")),
    )),
    Row("Capacity and autoscaling", (
        Panel("memory_bound", "Memory-bound fraction per pool",
              "Mean over the pool's replicas as the autoscaling policy saw it "
              "(deployments/utilization.py): near 1 speculation is free, near 0 it costs "
              "compute.", "percentunit",
              (Query("max by (pool) (ray_specserve_autoscaling_memory_bound)", "{{pool}}"),),
              autoscaled=True),
        Panel("replicas", "Replicas per pool", "Replicas reporting stats to the router, "
              "healthy replicas as Serve counts them, and the autoscaler's target.", "short",
              (Query("specserve_pool_replicas", "{{pool}} reporting"),
               Query(f'sum by (deployment) (ray_serve_deployment_replica_healthy'
                     f'{{deployment=~"{POOLS_RE}"}})', "{{deployment}} healthy"),
               Query(f'max by (deployment) (ray_serve_autoscaling_target_replicas'
                     f'{{deployment=~"{POOLS_RE}"}})', "{{deployment}} target")), main=True),
        Panel("autoscaler_decisions", "Autoscaler decisions",
              "Changes of a pool's target or reason (autoscaling/rules.py), per interval.",
              "short", (Query(f"sum by (pool, action, reason) "
                              f"(increase(ray_specserve_autoscaling_decisions_total[{RATE}]))",
                              "{{pool}} {{action}} · {{reason}}"),), bars=True,
              autoscaled=True),
    )),
    Row("Speculator rollout", (
        Panel("speculator_acceptance", "Live mean acceptance length per speculator",
              "1 + accepted / verification steps, by the speculator that served (its "
              "system_fingerprint: a canary's beside the incumbent's) and task, since the "
              "router started (core/rollout.py).", "none",
              (Query('max by (speculator, task) '
                     '(specserve_speculator_mean_acceptance_length{task=~"$task"})',
                     "{{speculator}} · {{task}}"),)),
        Panel("rollout", "Rollout state and outcomes", "The speculator rollout's step (canary, "
              "forward, back; none before any) and its candidate, and the rollouts ended by "
              "outcome (`specserve speculator rollout`, deployments/rollout.py).", "short",
              (Query("max by (state, candidate) (specserve_rollout_state)",
                     "{{state}} {{candidate}}"),
               Query("max by (outcome) (specserve_rollouts_total)", "rolled {{outcome}}"))),
    )),
    Row("Errors", (
        Panel("http_status", "HTTP responses by status", "Responses per second of Serve's HTTP "
              "proxy to the OpenAI endpoints, by status code.", "reqps",
              (Query(f"sum by (status_code) "
                     f"({rate('ray_serve_num_http_requests_total', OPENAI)})",
                     "{{status_code}}"),), stack=True),
        Panel("errors", "Errors, 429s and retries", "4xx/5xx responses by code (Serve's proxy), "
              "requests refused with 429 because their pools were full (router), and requests "
              "retried after a pool lost them before any output.", "reqps",
              (Query(f"sum by (error_code) "
                     f"({rate('ray_serve_num_http_error_requests_total', OPENAI)})",
                     "HTTP {{error_code}}"),
               Query(f"sum({rate('specserve_requests_total', REFUSED)})", "429: pools full"),
               Query(f"sum by (route) ({rate('specserve_retries_total')})",
                     "retried: {{route}} lost it"))),
    )),
)


def panels() -> list[Panel]:
    """Every panel, in dashboard order."""
    return [p for row in ROWS for p in row.panels]


def evaluable(expr: str, window: str = "5m") -> str:
    """`expr` as plain PromQL: `$__rate_interval` → `window`, `$task` → every task."""
    return expr.replace(RATE, window).replace("$task", ".*")
