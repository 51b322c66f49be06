"""vLLM's engine metrics through Ray's metrics export, tagged with the pool that hosts the engine.

Ray Serve LLM exports vLLM's metrics with vLLM's `RayPrometheusStatLogger` when the LLMConfig's
`log_engine_metrics` is on, but that logger then *replaces* vLLM's in-process Prometheus logger,
which the stats push reads (`get_metrics_snapshot()`, deployments/pools.py). So the pools run with
`log_engine_metrics=False` and each replica adds `PoolStatLogger` to its engine beside the
in-process logger (`export_engine_metrics`).

Series keep the names of Ray Serve LLM's own export (vLLM's name, `:` as `_`, Ray's `ray_` prefix:
`vllm:time_to_first_token_seconds` → `ray_vllm_time_to_first_token_seconds_bucket`) and vLLM's
labels (`model_name`, `engine`, `ReplicaId`), plus the replica's Serve `deployment` (the pool:
`vanilla` / `speculative`) and `application`, so that a panel can split any of them by pool:

    histogram_quantile(0.99, sum by (deployment, le) (
        rate(ray_vllm_time_to_first_token_seconds_bucket[5m])))
"""

from __future__ import annotations

import logging

from prometheus_client import REGISTRY
from ray import serve
from vllm.v1.metrics.ray_wrappers import RayCounterWrapper, RayGaugeWrapper, \
    RayHistogramWrapper, RayKVConnectorProm, RayPerfMetricsProm, RayPrometheusStatLogger, \
    RaySpecDecodingProm

logger = logging.getLogger("specserve.pools")

SERVE_TAGS = ("deployment", "application")


class _ServeTagged:
    """A vLLM Ray metric wrapper whose series also carry the replica's Serve deployment and
    application (default tags, read from the replica context at creation)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        ctx = serve.get_replica_context()
        self.metric.set_default_tags({"deployment": ctx.deployment, "application": ctx.app_name})

    @staticmethod
    def _get_tag_keys(labelnames: list[str] | None) -> tuple[str, ...]:
        return (*(labelnames or ()), "ReplicaId", *SERVE_TAGS)

    def _build_tags(self, *labels, **labelskwargs) -> dict[str, str]:
        # vLLM's labels by position, as RayPrometheusMetric._build_tags, which counts every tag
        # key but ReplicaId as one (the Serve tags are default tags).
        names = self.metric._tag_keys[:-1 - len(SERVE_TAGS)]
        if labels:
            if len(labels) != len(names):
                raise ValueError(f"expected {len(names)} labels ({names}), got {len(labels)}")
            labelskwargs.update(zip(names, labels))
        labelskwargs["ReplicaId"] = self._tags["ReplicaId"]
        return {k: v if isinstance(v, str) else str(v) for k, v in labelskwargs.items()}


class _Gauge(_ServeTagged, RayGaugeWrapper):
    pass


class _Counter(_ServeTagged, RayCounterWrapper):
    pass


class _Histogram(_ServeTagged, RayHistogramWrapper):
    pass


class _SpecDecoding(RaySpecDecodingProm):
    _counter_cls = _Counter


class _KVConnector(RayKVConnectorProm):
    _gauge_cls = _Gauge
    _counter_cls = _Counter
    _histogram_cls = _Histogram


class _PerfMetrics(RayPerfMetricsProm):
    _counter_cls = _Counter


class PoolStatLogger(RayPrometheusStatLogger):
    """vLLM's Ray stat logger with every series tagged by Serve deployment and application.

    Must be created inside a Serve replica (it reads `serve.get_replica_context()`).

    Also keeps the inter-token latencies of decode-only iterations (`decode_itl_count`,
    `decode_itl_sum_s`, seconds): those of engine iterations in which no request got its first
    token. A step that also runs another request's prefill lengthens every running request's
    inter-token latency by that prefill (a whole 768-token prompt on the weight-bound target,
    without prefix-cache hits); the router's step-time model can leave those steps out
    (`PoolConfig.step_samples`, `core.stats.busy_window_samples`). Chunks of a prefill that
    does not finish in the step are not seen (vLLM reports a request's prefill when its first
    token comes).
    """

    _gauge_cls = _Gauge
    _counter_cls = _Counter
    _histogram_cls = _Histogram
    _spec_decoding_cls = _SpecDecoding
    _kv_connector_cls = _KVConnector
    _perf_metrics_cls = _PerfMetrics
    decode_itl_count: int = 0
    decode_itl_sum_s: float = 0.0

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
        """vLLM's `record`, then the decode-only tally (never raises from it)."""
        super().record(scheduler_stats, iteration_stats, mm_cache_stats, engine_idx)
        try:
            itls = decode_only_latencies(iteration_stats)
            self.decode_itl_count += len(itls)
            self.decode_itl_sum_s += float(sum(itls))
        except Exception:  # a tally must never stop the engine's output loop
            logger.exception("decode-only inter-token latency tally failed")


def decode_only_latencies(iteration_stats) -> list[float]:
    """The inter-token latencies (seconds) of a vLLM `IterationStats` when no request got its
    first token in that iteration, else [] (also for None: an iteration without stats)."""
    if iteration_stats is None or iteration_stats.time_to_first_tokens_iter:
        return []
    return iteration_stats.inter_token_latencies_iter  # read, not kept: no copy per step


def export_engine_metrics(engine_client) -> PoolStatLogger | None:
    """Adds a `PoolStatLogger` to a running vLLM `AsyncLLM`'s stat loggers.

    `PrometheusStatLogger.__init__` (which `PoolStatLogger` inherits) unregisters every `vllm:`
    collector from prometheus_client's registry (vllm/v1/metrics/loggers.py, vLLM 0.32), the
    in-process logger's included: those are registered again, unchanged, so
    `get_metrics_snapshot()` keeps reading them.

    Args:
        engine_client: the replica's `AsyncLLM` (Ray Serve LLM's `VLLMEngine._engine_client`).

    Returns:
        The logger, or None when the engine does not log stats (`disable_log_stats`) or the
        logger could not be added (logged: the replica serves without the export).
    """
    manager = getattr(engine_client, "logger_manager", None)
    if manager is None:
        return None
    try:
        return _add_logger(engine_client, manager)
    except Exception:  # the export must never stop a replica from serving
        logger.exception("vLLM metrics export through Ray not available")
        return None


def _add_logger(engine_client, manager) -> PoolStatLogger:
    in_process = [c for c in list(REGISTRY._collector_to_names)
                  if getattr(c, "_name", "").startswith("vllm:")]
    stat_logger = PoolStatLogger(engine_client.vllm_config, manager.engine_indexes)
    registered = set(REGISTRY._collector_to_names)
    for collector in in_process:
        if collector not in registered:
            REGISTRY.register(collector)
    stat_logger.log_engine_initialized()
    manager.stat_loggers.append(stat_logger)
    return stat_logger
