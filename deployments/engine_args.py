"""`engine_kwargs` of a pool checked against vLLM's `AsyncEngineArgs` and the config's own fields."""

from __future__ import annotations

import dataclasses
import functools
from typing import Annotated

import vllm
from pydantic import TypeAdapter, ValidationError
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


@functools.cache
def _config_fields() -> dict[str, list]:
    """{field name: its pydantic FieldInfo in each of vLLM's config classes that has it}
    (`vllm.config.*Config`, pydantic dataclasses)."""
    import vllm.config

    owners: dict[str, list] = {}
    for cls_name in dir(vllm.config):
        cls = getattr(vllm.config, cls_name)
        if cls_name.endswith("Config") and isinstance(getattr(cls, "__pydantic_fields__", None),
                                                      dict):
            for field, info in cls.__pydantic_fields__.items():
                owners.setdefault(field, []).append(info)
    return owners


@functools.cache
def _field_adapter(key: str) -> TypeAdapter | None:
    """A pydantic TypeAdapter of engine argument `key`'s type and constraints, where exactly one
    of vLLM's config classes holds it under its own name, e.g. `stream_interval` (SchedulerConfig,
    int >= 1); else None (a name several configs use: which one vLLM fills is not ours to guess).
    vLLM validates the same field when the engine builds its config; here the config is refused
    before any replica starts. Checks in a config class's `__post_init__` or validators are not
    repeated."""
    infos = _config_fields().get(key, [])
    if len(infos) != 1:
        return None
    try:
        return TypeAdapter(Annotated[infos[0].annotation, *infos[0].metadata])
    except Exception:  # noqa: BLE001 (a forward reference pydantic cannot build alone)
        return None


# pydantic error types of a number outside a `Field` bound: the only refusals repeated here.
# Type errors are left to vLLM: `EngineArgs` takes some values in another form than its config
# class holds them (None for "derive it", strings it parses) and converts them first.
_BOUND_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal",
                 "multiple_of"}


def check_engine_kwarg_value(field: str, key: str, value) -> None:
    """Refuses a number `value` outside the bounds vLLM's config class sets for engine argument
    `key` (`Field(ge=...)` and the like; `_field_adapter`), e.g. `stream_interval: 0`. Other
    values, and arguments no single config class holds, are left to vLLM.

    Raises:
        ConfigError: `<field>: <pydantic's message> (vLLM <version>, got <value>)`.
    """
    adapter = _field_adapter(key)
    if adapter is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    try:
        adapter.validate_python(value)
    except ValidationError as e:
        errors = e.errors()
        if errors and all(err["type"] in _BOUND_ERRORS for err in errors):
            raise ConfigError(f"{field}: {errors[0]['msg']} (vLLM {vllm.__version__}, got "
                              f"{value!r})") from None


def check_engine_kwargs(pool: PoolConfig) -> None:
    """Refuses `engine_kwargs` that vLLM's `AsyncEngineArgs` does not take (a TypeError at
    replica start otherwise), that a config field already sets, or whose value vLLM's config
    class refuses (`check_engine_kwarg_value`).

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
        check_engine_kwarg_value(field, key, pool.engine_kwargs[key])
