"""`llm_config`: a pool's placement (strategy, node labels) as Ray Serve LLM and Serve take it."""

from core import DEFAULT_CONFIG_PATH, SpecserveConfig
from deployments.pools import llm_config


def _pool(**fields):
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    data["speculative"] |= fields
    cfg = SpecserveConfig.from_dict(data)
    return llm_config(cfg.model, cfg.speculative)


def test_default_pool_packs_its_bundles_on_one_node_and_selects_no_labels():
    llm = _pool()
    assert llm.placement_group_config == {"bundles": [{"CPU": 1}], "strategy": "STRICT_PACK"}
    assert "placement_group_bundle_label_selector" not in llm.deployment_config


def test_node_labels_select_every_bundle():
    llm = _pool(node_labels={"specserve.io/pool": "speculative"})
    assert llm.deployment_config["placement_group_bundle_label_selector"] == [
        {"specserve.io/pool": "speculative"}]
    assert llm.deployment_config["ray_actor_options"] == {"num_cpus": 0}


def test_a_canary_replica_gets_the_candidate_in_the_engine_config_vllm_reads(tmp_path,
                                                                            monkeypatch):
    import json
    from types import SimpleNamespace

    import pytest

    from core.rollout import CANARY_ENV, canary_env
    from deployments.pools import PoolServer

    (tmp_path / "config.json").write_text("{}")
    base = _pool(speculator={"method": "eagle3", "model": str(tmp_path.parent),
                             "num_speculative_tokens": 4})
    base.get_engine_config()  # cached by the LLMConfig: what a copy would keep
    ctx = lambda rank: SimpleNamespace(rank=SimpleNamespace(rank=rank))  # noqa: E731
    monkeypatch.setenv(CANARY_ENV, canary_env(str(tmp_path), 1))
    canary = PoolServer._with_canary(base, ctx(0))
    assert canary.get_engine_config().engine_kwargs["speculative_config"]["model"] == str(tmp_path)
    assert canary.deployment_config == base.deployment_config
    assert PoolServer._with_canary(base, ctx(1)) is base  # rank 1: the incumbent
    monkeypatch.setenv(CANARY_ENV, canary_env(str(tmp_path), None))
    assert PoolServer._with_canary(base, ctx(5)) is not base  # every replica
    monkeypatch.setenv(CANARY_ENV, canary_env(str(tmp_path / "missing"), None))
    with pytest.raises(ValueError, match="config.json"):
        PoolServer._with_canary(base, ctx(0))
    monkeypatch.setenv(CANARY_ENV, json.dumps({"replicas": 1}))
    with pytest.raises(ValueError, match=CANARY_ENV):
        PoolServer._with_canary(base, ctx(0))


def test_cpu_engines_get_a_short_busy_poll_window_and_gpu_engines_keep_vllms():
    from core.pool_config import CPU_SHM_BUSY_LOOP_S, SHM_BUSY_LOOP_ENV

    env = _pool().runtime_env["env_vars"]
    assert float(env[SHM_BUSY_LOOP_ENV]) == CPU_SHM_BUSY_LOOP_S
    assert float(_pool(shm_busy_loop_s=1).runtime_env["env_vars"][SHM_BUSY_LOOP_ENV]) == 1.0
    gpu = _pool(accelerator="gpu")
    assert SHM_BUSY_LOOP_ENV not in gpu.runtime_env["env_vars"]
    assert gpu.runtime_env["env_vars"] == {}
    gpu = _pool(accelerator="gpu", shm_busy_loop_s=0.01)
    assert gpu.runtime_env["env_vars"] == {SHM_BUSY_LOOP_ENV: "0.01"}


def test_the_stream_batching_interval_reaches_ray_serve_llm_and_the_first_chunk_is_not_held():
    import pytest
    from ray.serve.llm.deployment import LLMServer

    from core import ConfigError

    from deployments.pools import PoolServer

    assert _pool().experimental_configs == {}  # Ray Serve LLM's default (50 ms)
    cfg = _pool(stream_batching_interval_ms=10)
    assert cfg.experimental_configs == {"stream_batching_interval_ms": 10}
    for bad in (-1, float("inf")):
        with pytest.raises(ConfigError, match="speculative.stream_batching_interval_ms"):
            _pool(stream_batching_interval_ms=bad)
    assert PoolServer._batch_output_stream is not LLMServer._batch_output_stream


def test_a_per_batch_size_table_asks_the_engine_for_per_step_acceptance():
    """The router reads each response's drafts per step under a γ table (router/decider.py
    `learn`): the engine reports them at vLLM's "detailed" level, the histogram alone otherwise."""
    spec = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).speculative.speculator.model_dump(
        mode="json")
    plain = _pool().engine_kwargs
    table = _pool(speculator=spec | {"num_speculative_tokens_per_batch_size": [[1, 8, 4],
                                                                               [9, 64, 2]]})
    assert plain["per_request_spec_decode_metrics"] == "summary"
    assert table.engine_kwargs["per_request_spec_decode_metrics"] == "detailed"
    assert table.engine_kwargs["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 8, 4], [9, 64, 2]]
