"""Configs that validate must start: each config field with a constraint vLLM 0.32 or Ray Serve 2.60
enforces at start is either refused by specserve's validation (naming the field) or passes vLLM's
and Serve's own start-time checks, run here without starting an engine:

- vLLM: `AsyncEngineArgs(**engine_kwargs).create_engine_config()`, the ModelConfig /
  SpeculativeConfig / SchedulerConfig / ParallelConfig / CacheConfig checks an engine runs first;
- Ray Serve: `build_app_from_config` (Serve deployment and autoscaling options, Ray Serve LLM's
  `LLMConfig`).

Two vLLM checks run only once the engine starts (DraftModelProposer's draft TP, Medusa's missing
heads at weight loading): those rows say so. The list of what is checked where lives in
core/config.py's module docstring. The batch-size schedule (vLLM's own validator, pure):
tests/unit/test_config_sweep.py.
"""

from __future__ import annotations

import json
import warnings

import pytest
from ray.serve.config import AutoscalingConfig as ServeAutoscalingConfig
from vllm.engine.arg_utils import AsyncEngineArgs

from core import ConfigError, SpecserveConfig, models_dir
from tests.config_data import BASE, config_data
from deployments.app import build_app_from_config, load_config
from deployments.pools import llm_config



def _vllm_error(pool_kwargs: dict) -> str | None:
    """vLLM's start-time config error for one engine's kwargs, None when it accepts them."""
    try:
        AsyncEngineArgs(**pool_kwargs).create_engine_config()
    except Exception as e:  # vLLM raises ValueError, pydantic's ValidationError or TypeError
        return f"{type(e).__name__}: {e}"
    return None


def _engine_kwargs(cfg: SpecserveConfig, pool: str) -> dict:
    llm = llm_config(cfg.model, getattr(cfg, pool))
    return {"model": llm.model_loading_config.model_source, **llm.engine_kwargs}


@pytest.fixture(scope="module")
def short_draft(tmp_path_factory) -> str:
    """The lab's draft with a 512-token context (config.json is all vLLM's config checks read)."""
    src = json.loads((models_dir() / "draft" / "config.json").read_text())
    path = tmp_path_factory.mktemp("draft512")
    (path / "config.json").write_text(json.dumps({**src, "max_position_embeddings": 512}))
    return str(path)


ACCEPTED = {  # boundaries that specserve accepts: vLLM's and Serve's checks must accept them too
    "default": {},
    "speculator context = target's = draft's": {"speculative__speculator__max_model_len": 1024},
    "eagle3 context = target's": {"speculative__speculator": {
        "method": "eagle3", "model": "${models}/eagle3", "max_model_len": 1024}},
    "medusa k = its num_heads": {"speculative__speculator": {
        "method": "medusa", "model": "${models}/medusa", "num_speculative_tokens": 5}},
    "ngram lookup min = max": {"speculative__speculator": {
        "method": "ngram", "model": None, "prompt_lookup_min": 3, "prompt_lookup_max": 3}},
    "max_num_seqs = default max_num_batched_tokens": {"vanilla__max_num_seqs": 2048},
    "max_num_seqs raised with max_num_batched_tokens": {"vanilla__max_num_seqs": 4096,
                                                        "vanilla__engine_kwargs": {
                                                            "max_num_batched_tokens": 4096}},
    "draft_model draft TP = target TP (gpu)": {
        "vanilla": {"accelerator": "gpu", "tensor_parallel_size": 2},
        "speculative": {"accelerator": "gpu", "tensor_parallel_size": 2},
        "speculative__speculator__draft_tensor_parallel_size": 2, "autoscaling__enabled": False},
    "eagle3 draft TP 1 under target TP 2 (gpu)": {
        "vanilla": {"accelerator": "gpu", "tensor_parallel_size": 2},
        "speculative": {"accelerator": "gpu", "tensor_parallel_size": 2},
        "speculative__speculator": {"method": "eagle3", "model": "${models}/eagle3",
                                    "draft_tensor_parallel_size": 1},
        "autoscaling__enabled": False},
    "a pool scaled to zero": {"autoscaling__speculative": {"min_replicas": 0}},
}


@pytest.mark.parametrize("changes", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted_config_passes_vllm_and_serve_start_checks(changes):
    cfg = load_config(config_data(**changes))
    for pool in cfg.pools():
        error = _vllm_error(_engine_kwargs(cfg, pool))
        assert error is None, f"{pool}: {error}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # Serve's "will raise in a future release"
        build_app_from_config(cfg, autoscale=cfg.autoscaling.enabled)


# (specserve's config changes, the field its error names, what vLLM (engine kwargs changed from
# the default speculative pool's) or Serve (AutoscalingConfig kwargs) gets instead, where that
# refuses it: vLLM's "config" checks, a starting vLLM "engine", or "serve")
REFUSED = {
    "target context beyond its checkpoint": (
        {"model__max_model_len": 2048}, "model.max_model_len: 2048 is above the target "
        "checkpoint's max_position_embeddings 1024", {"max_model_len": 2048}, "config"),
    "speculator context beyond the target's": (
        {"speculative__speculator__max_model_len": 2048},
        "speculative.speculator.max_model_len: 2048 is above model.max_model_len 1024",
        {"speculative_config": {"max_model_len": 2048}}, "config"),
    "speculator context beyond its checkpoint": (
        {"speculative__speculator": {"model": "{short_draft}", "max_model_len": 1024}},
        "speculative.speculator.max_model_len: 1024 is above the speculator checkpoint's "
        "max_position_embeddings 512", {"speculative_config": {"model": "{short_draft}",
                                                                "max_model_len": 1024}}, "config"),
    "draft TP neither 1 nor the target's": (
        {"speculative": {"accelerator": "gpu", "tensor_parallel_size": 4},
         "speculative__speculator__draft_tensor_parallel_size": 2},
        "speculative.speculator.draft_tensor_parallel_size: 2 must equal",
        {"tensor_parallel_size": 4, "speculative_config": {"draft_tensor_parallel_size": 2}},
        "config"),
    "draft_model draft TP 1 under target TP 2": (
        {"speculative": {"accelerator": "gpu", "tensor_parallel_size": 2},
         "speculative__speculator__draft_tensor_parallel_size": 1},
        "speculative.speculator.draft_tensor_parallel_size: 1 must equal "
        "speculative.tensor_parallel_size 2", None, "engine"),
    "target TP not dividing its heads": (
        {"speculative": {"accelerator": "gpu", "tensor_parallel_size": 3},
         "autoscaling__budget_accelerators": 4},
        "speculative.tensor_parallel_size: 3 does not divide the target's num_attention_heads 4",
        {"tensor_parallel_size": 3, "speculative_config": None}, "config"),
    "medusa k above its heads": (
        {"speculative__speculator": {"method": "medusa", "model": "${models}/medusa",
                                     "num_speculative_tokens": 6}},
        "speculative.speculator.num_speculative_tokens: 6 is above the Medusa checkpoint's "
        "num_heads 5", None, "engine"),
    "running batch beyond the scheduler's token budget": (
        {"vanilla__max_num_seqs": 2049},
        "vanilla.max_num_seqs: 2049 is above vLLM's max_num_batched_tokens 2048",
        {"max_num_seqs": 2049, "speculative_config": None}, "config"),
    "unknown engine argument": (
        {"vanilla__engine_kwargs": {"max_num_seq": 8}},
        "vanilla.engine_kwargs.max_num_seq: not a vLLM", {"max_num_seq": 8}, "config"),
    "engine argument below vLLM's bound": (
        {"vanilla__engine_kwargs": {"stream_interval": 0}},
        "vanilla.engine_kwargs.stream_interval: Input should be greater than or equal to 1",
        {"stream_interval": 0, "speculative_config": None}, "config"),
    "ngram lookup min above max": (
        {"speculative__speculator": {"method": "ngram", "model": None, "prompt_lookup_min": 4,
                                     "prompt_lookup_max": 3}},
        "prompt_lookup_min: must be <= prompt_lookup_max", {"speculative_config": {
            "method": "ngram", "model": None, "prompt_lookup_min": 4, "prompt_lookup_max": 3}},
        "config"),
    "no speculative tokens": (
        {"speculative__speculator__num_speculative_tokens": 0},
        "speculative.speculator.num_speculative_tokens", {"speculative_config": {
            "num_speculative_tokens": 0}}, "config"),
    "gpu memory fraction above 1": (
        {"vanilla": {"accelerator": "gpu", "gpu_memory_utilization": 1.5}},
        "vanilla.gpu_memory_utilization", {"gpu_memory_utilization": 1.5,
                                           "speculative_config": None}, "config"),
    "Serve look-back not above the metrics interval": (
        {"autoscaling": {"look_back_period_s": 2.0, "metrics_interval_s": 2.0}},
        "autoscaling.look_back_period_s: 2 must be above metrics_interval_s 2",
        {"look_back_period_s": 2.0, "metrics_interval_s": 2.0}, "serve"),
    "Serve min_replicas above max_replicas": (
        {"autoscaling__vanilla": {"min_replicas": 3, "max_replicas": 2}},
        "autoscaling.vanilla.min_replicas: must be <= max_replicas",
        {"min_replicas": 3, "max_replicas": 2}, "serve"),
}


def _fill(value, short_draft: str):
    return json.loads(json.dumps(value).replace("{short_draft}", short_draft))


@pytest.mark.parametrize("changes, message, vllm_changes, stage", REFUSED.values(),
                         ids=REFUSED.keys())
def test_refused_config_names_the_field_and_vllm_refuses_it_too(short_draft, changes, message,
                                                                vllm_changes, stage):
    changes = _fill(changes, short_draft)
    with pytest.raises(ConfigError) as e:
        cfg = load_config(config_data(**changes))
        build_app_from_config(cfg, autoscale=cfg.autoscaling.enabled)  # engine_kwargs checks
    assert message in str(e.value)
    if stage == "serve":  # Ray Serve's AutoscalingConfig refuses it, or warns it soon will
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            with pytest.raises((ValueError, FutureWarning)):
                ServeAutoscalingConfig(**vllm_changes)
        return
    if stage == "engine":
        return  # vLLM refuses it only in a starting engine (module docstring)
    kwargs = _engine_kwargs(load_config(BASE), "speculative")
    for key, value in _fill(vllm_changes, short_draft).items():
        if isinstance(value, dict):
            kwargs[key] = {**kwargs[key], **value}
        elif value is None:
            kwargs.pop(key)
        else:
            kwargs[key] = value
    assert _vllm_error(kwargs) is not None, "vLLM accepts what specserve refuses"
