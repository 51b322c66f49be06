"""Prometheus metrics the ingress serves at `GET /metrics` (prefix `specserve_`).

Decisions are counted by this ingress replica; pool figures come from the StatsBoard and so cover
every replica of each pool. Derived figures in PromQL:

    acceptance rate        rate(specserve_spec_decode_num_accepted_tokens_total[5m])
                           / rate(specserve_spec_decode_num_draft_tokens_total[5m])
    mean acceptance length 1 + rate(specserve_spec_decode_num_accepted_tokens_total[5m])
                           / rate(specserve_spec_decode_num_drafts_total[5m])
    route mix              sum by (route) (rate(specserve_requests_total[5m]))
    mean expected speedup  rate(specserve_expected_speedup_sum{route="speculative"}[5m])
    of requests sent       / rate(specserve_expected_speedup_count{route="speculative"}[5m])
    speculative
    retries                sum by (route) (rate(specserve_retries_total[5m]))

The speculative pool's counters are also served under vLLM's own names, summed over the pool's
replicas and labelled `model_name` (as vLLM labels them) and `pool`:
`vllm:spec_decode_num_drafts_total`, `vllm:spec_decode_num_draft_tokens_total`,
`vllm:spec_decode_num_accepted_tokens_total`, `vllm:spec_decode_num_accepted_tokens_per_pos_total`
(label `position`). vLLM's tools read these from the server's `/metrics`: `vllm bench serve`
prints acceptance from them (it sums every `vllm:spec_decode_*_total` line), and vLLM's
speculative-decoding Grafana dashboard queries them. Ray's metrics export keeps vLLM's per-engine
series as `ray_vllm_*`.

The dashboard and alert rules over these series: cluster/observability/.
"""

from __future__ import annotations

from typing import Callable, Mapping, get_args

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, \
    generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from core import PoolStats, Route, expected_tokens
from core.rollout import Tally
from router.policy import SpeedupModel

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
disable_created_metrics()  # no `_created` series next to each counter


class RouterMetrics:
    """The ingress's registry: decision counters plus a collector over the pools' latest stats.

    Args:
        pool_stats: returns the current per-pool view (PressureTracker's board snapshot merged
            with local in-flight counts); called at scrape time only.
        speedup_model: the router's speedup model (acceptance per task, step times per pool).
        model_name: the served model name, the `model_name` label of the `vllm:` series.
        rollout: returns the live acceptance per speculator fingerprint and task, and the
            rollout state (`RouteDecider.speculator_tallies`, `.rollout`); called at scrape time.
    """

    def __init__(self, pool_stats: Callable[[], Mapping[str, PoolStats]],
                 speedup_model: SpeedupModel, model_name: str,
                 rollout: Callable[[], tuple[Mapping[str, Mapping[str, Tally]], dict]]
                 | None = None):
        self.registry = CollectorRegistry()
        self.requests = Counter("specserve_requests", "Requests routed, by path, reason and task.",
                                ["route", "reason", "task"], registry=self.registry)
        self.speedup = Histogram("specserve_expected_speedup", "Expected speedup S of the "
                                 "speculative path at decision time (auto, requested or pinned "
                                 "routes), by task and the route taken.", ["task", "route"],
                                 buckets=(0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 4, 6),
                                 registry=self.registry)
        self.wakes = Counter("specserve_pool_wakes", "Wake calls sent to a pool scaled to zero "
                             "(a request wanted it), by pool.", ["pool"], registry=self.registry)
        self.retries = Counter("specserve_retries", "Requests retried after a pool lost them "
                               "before any output, by the pool that lost them.", ["route"],
                               registry=self.registry)
        for route in get_args(Route):  # every series from the start: rate() sees the first one
            self.retries.labels(route)
        self.registry.register(_PoolCollector(pool_stats))
        self.registry.register(_VllmSpecDecodeCollector(pool_stats, model_name))
        self.registry.register(_EstimateCollector(speedup_model))
        if rollout is not None:
            self.registry.register(_RolloutCollector(rollout))

    def observe_decision(self, route: str, reason: str, task: str, speedup: float | None) -> None:
        self.requests.labels(route, reason, task).inc()
        if speedup is not None:
            self.speedup.labels(task, route).observe(speedup)

    def observe_retry(self, route: str) -> None:
        """A replica of `route` failed a request before any output; the ingress retries it."""
        self.retries.labels(route).inc()

    def observe_wake(self, pool: str) -> None:
        self.wakes.labels(pool).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _PoolCollector:
    def __init__(self, pool_stats: Callable[[], Mapping[str, PoolStats]]):
        self._pool_stats = pool_stats

    def describe(self):
        return []

    def collect(self):
        pools = self._pool_stats()
        gauges = {
            "replicas": ("Live replicas reporting stats.", lambda p: p.replicas),
            "in_flight": ("Sequences in flight (prompts x n of each request) from all ingress "
                          "replicas.", lambda p: p.in_flight),
            "num_requests_running": ("Engine running batch (sum over replicas).",
                                     lambda p: p.engine.num_requests_running),
            "num_requests_waiting": ("Engine queue (sum over replicas).",
                                     lambda p: p.engine.num_requests_waiting),
            "kv_cache_usage": ("KV-cache usage fraction (max over replicas).",
                               lambda p: p.engine.kv_cache_usage),
        }
        for name, (doc, get) in gauges.items():
            g = GaugeMetricFamily(f"specserve_pool_{name}", doc, labels=["pool"])
            for pool, p in pools.items():
                g.add_metric([pool], get(p))
            yield g
        counters = {
            "generation_tokens": "Output tokens generated.",
            "num_drafts": "Target steps that verified drafts (vLLM spec_decode_num_drafts).",
            "num_draft_tokens": "Draft tokens proposed.",
            "num_accepted_tokens": "Draft tokens accepted.",
        }
        for attr, doc in counters.items():
            prefix = "specserve_pool" if attr == "generation_tokens" else "specserve_spec_decode"
            c = CounterMetricFamily(f"{prefix}_{attr}", doc, labels=["pool"])
            for pool, p in pools.items():
                c.add_metric([pool], getattr(p.engine, attr))
            yield c
        per_pos = CounterMetricFamily("specserve_spec_decode_num_accepted_tokens_per_pos",
                                      "Draft tokens accepted at each draft position.",
                                      labels=["pool", "position"])
        for pool, p in pools.items():
            for i, n in enumerate(p.engine.accepted_per_pos):
                per_pos.add_metric([pool, str(i)], n)
        yield per_pos
        rows = CounterMetricFamily("specserve_capture_rows", "Captured rows by outcome: written "
                                   "to the store, or dropped (store full, backlog, store error); "
                                   "requests are never dropped (deployments/capture.py).",
                                   labels=["pool", "outcome"])
        added = GaugeMetricFamily("specserve_capture_added_p99_seconds", "p99 of the time capture "
                                  "added to a captured request's path (max over replicas).",
                                  labels=["pool"])
        for pool, p in pools.items():
            for outcome, n in sorted(p.engine.capture_rows.items()):
                rows.add_metric([pool, outcome], n)
            if p.engine.capture_rows:
                added.add_metric([pool], p.engine.capture_added_p99_s)
        yield rows
        yield added


class _VllmSpecDecodeCollector:
    """The speculative pool's spec-decode counters under vLLM's names (module docstring).

    Only pools that speculate get these series, as a vLLM server exports them only with a
    `speculative_config`; summed over pools they are the speculative pool's.
    """

    SPECULATING_POOLS = ("speculative",)

    def __init__(self, pool_stats: Callable[[], Mapping[str, PoolStats]], model_name: str):
        self._pool_stats = pool_stats
        self._model_name = model_name

    def describe(self):
        return []

    def collect(self):
        pools = {pool: p for pool, p in self._pool_stats().items()
                 if pool in self.SPECULATING_POOLS}
        counters = {
            "num_drafts": "Number of spec decoding drafts.",
            "num_draft_tokens": "Number of draft tokens.",
            "num_accepted_tokens": "Number of accepted tokens.",
        }
        for attr, doc in counters.items():
            c = CounterMetricFamily(f"vllm:spec_decode_{attr}", doc,
                                    labels=["model_name", "pool"])
            for pool, p in pools.items():
                c.add_metric([self._model_name, pool], getattr(p.engine, attr))
            yield c
        per_pos = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos",
                                      "Accepted tokens per draft position.",
                                      labels=["model_name", "pool", "position"])
        for pool, p in pools.items():
            for i, n in enumerate(p.engine.accepted_per_pos):
                per_pos.add_metric([self._model_name, pool, str(i)], n)
        yield per_pos


class _EstimateCollector:
    """α per position and mean acceptance length per (task, temperature bucket); step times."""

    def __init__(self, speedup_model: SpeedupModel):
        self._model = speedup_model

    def describe(self):
        return []

    def collect(self):
        alpha = GaugeMetricFamily("specserve_acceptance_alpha", "Estimated per-position acceptance "
                                  "α_i. Decode steps that carried no drafts (an n-gram speculator "
                                  "without a match) count as rejections at position 1, so α_1 is "
                                  "per decode step, below vLLM's per-draft acceptance for n-gram.",
                                  labels=["task", "temperature", "position", "context"])
        length = GaugeMetricFamily("specserve_mean_acceptance_length", "Estimated E[τ], tokens per "
                                   "verification step (bonus included).",
                                   labels=["task", "temperature", "context"])
        for (task, bucket), alphas in self._model.acceptance.table().items():
            temperature, _, edge = bucket.partition("@L")
            context = f"≥{edge}" if edge else "short"  # core/acceptance.py CONTEXT_EDGES
            for i, a in enumerate(alphas, start=1):
                alpha.add_metric([task, temperature, str(i), context], a)
            length.add_metric([task, temperature, context], expected_tokens(alphas))
        yield alpha
        yield length
        step = GaugeMetricFamily("specserve_step_seconds", "Seconds per decode step as a request "
                                 "lives it, by requests in the engine (startup profile, then "
                                 "online samples; core/step_time.py).",
                                 labels=["pool", "batch"])
        for pool, model in self._model.step_times.items():
            for batch, seconds in model.points().items():
                step.add_metric([pool, str(batch)], seconds)
        yield step
        slowdown = GaugeMetricFamily("specserve_host_slowdown", "ρ: a pool's step time while the "
                                     "other pool is busy over its step time while the other is "
                                     "idle, at the same batch (1: separate accelerators; "
                                     "core/step_time.py HostSharing).", labels=["pool"])
        for pool, rho in self._model.host_sharing.slowdowns().items():
            slowdown.add_metric([pool], rho)
        yield slowdown


class _RolloutCollector:
    """Live acceptance per speculator (the canary's against the incumbent's) and the rollout's
    state and outcomes (core/rollout.py, deployments/rollout.py)."""

    def __init__(self, rollout: Callable[[], tuple[Mapping[str, Mapping[str, Tally]], dict]]):
        self._rollout = rollout

    def describe(self):
        return []

    def collect(self):
        tallies, state = self._rollout()
        length = GaugeMetricFamily(
            "specserve_speculator_mean_acceptance_length", "Live mean acceptance length (1 + "
            "accepted / verification steps with drafts) by the speculator that served (its "
            "system_fingerprint) and task, over every ingress replica.",
            labels=["speculator", "task"])
        steps = CounterMetricFamily(
            "specserve_speculator_steps", "Verification steps with drafts behind "
            "specserve_speculator_mean_acceptance_length.", labels=["speculator", "task"])
        for fp, by_task in tallies.items():
            for task, t in by_task.items():
                length.add_metric([fp, task], t.mean_acceptance_length)
                steps.add_metric([fp, task], t.steps)
        yield length
        yield steps
        current = GaugeMetricFamily(
            "specserve_rollout_state", "1 for the speculator rollout's current step (canary, "
            "forward: rolled forward, back: rolled back; none before any) and its candidate.",
            labels=["state", "candidate"])
        current.add_metric([state.get("state", "none"), state.get("candidate", "")], 1)
        yield current
        outcomes = CounterMetricFamily("specserve_rollouts", "Speculator rollouts ended, by "
                                       "outcome (forward, back).", labels=["outcome"])
        for outcome in ("forward", "back"):
            outcomes.add_metric([outcome], state.get("outcomes", {}).get(outcome, 0))
        yield outcomes
