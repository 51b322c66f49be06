"""`engine_kwargs` of a pool checked against vLLM's `AsyncEngineArgs` and the config's own fields."""

from __future__ import annotations

import dataclasses

import vllm
from vllm.engine.arg_utils import AsyncEngineArgs

from core import ConfigError, PoolConfig, SpeculativePoolConfig

# EngineArgs that the config's own fields set (llm_config): engine_kwargs must not override them,
# or the router's limits (model.max_model_len, ...) would describe another engine.
_OWN_ENGINE_ARGS = {"model": "model.path", "tensor_parallel_size": "tensor_parallel_size",
                    "max_model_len": "model.max_model_len", "max_num_seqs": "max_num_seqs",
                    "dtype": "model.dtype", "enforce_eager": "enforce_eager",
                    "gpu_memory_utilization": "gpu_memory_utilization",
                    "speculative_config": "speculator", "disable_log_stats": None}
_ENGINE_ARGS = {f.name for f in dataclasses.fields(AsyncEngineArgs)}


def check_engine_kwargs(pool: PoolConfig) -> None:
    """Refuses `engine_kwargs` that vLLM's `AsyncEngineArgs` does not take (a TypeError at
    replica start otherwise) or that a config field already sets.

    Raises:
        ConfigError: naming `<pool>.engine_kwargs.<name>`.
    """
    name = "speculative" if isinstance(pool, SpeculativePoolConfig) else "vanilla"
    for key in pool.engine_kwargs:
        field = f"{name}.engine_kwargs.{key}"
        if key in _OWN_ENGINE_ARGS:
            own = _OWN_ENGINE_ARGS[key]
            raise ConfigError(f"{field}: set by the config" + (
                f" ({own if '.' in own else f'{name}.{own}'}); remove it here" if own else
                " (engine metrics feed the router)"))
        if key not in _ENGINE_ARGS:
            raise ConfigError(f"{field}: not a vLLM {vllm.__version__} engine argument")
