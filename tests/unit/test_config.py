"""Config validation: strict, every error names its field (../shared/cases #6 for vocab)."""

import json
from pathlib import Path

import pytest

from core import (DEFAULT_CONFIG_PATH, ConfigError, SpecserveConfig, check_checkpoints,
                            check_speculator_matches_target)


def _spec(**speculator):
    return {"speculative": {"speculator": {"method": "draft_model", "model": "/d", **speculator}}}


def test_default_config_loads_and_renders_speculative_config():
    cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    vllm = cfg.speculative.speculator.to_vllm()
    assert vllm == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                    "prompt_lookup_max": 4}


def test_a_quantized_draft_reaches_speculative_config():
    cfg = SpecserveConfig.from_dict(_spec(quantization="fp8"))
    assert cfg.speculative.speculator.to_vllm()["quantization"] == "fp8"


@pytest.mark.parametrize("data, field", [
    ({**_spec(), "bogus": 1}, "bogus"),
    (_spec(num_speculative_tokens=0), "speculative.speculator.num_speculative_tokens"),
    (_spec(method="medusa2"), "speculative.speculator.method"),
    ({"speculative": {"speculator": {"method": "eagle3"}}}, "model: required for method 'eagle3'"),
    ({"speculative": {"speculator": {"method": "ngram", "model": "/x"}}}, "model: must be unset"),
    ({"speculative": {"speculator": {"method": "ngram", "quantization": "fp8"}}},
     "quantization: ngram has no draft weights"),
    (_spec(quantization="int3"), "quantization: 'int3' is not a quantization method"),
    ({**_spec(), "vanilla": {"tensor_parallel_size": 4}}, "vanilla.tensor_parallel_size"),
    ({**_spec(), "server": {"port": 70000}}, "server.port"),
    ({**_spec(), "vanilla": {"node_labels": {"ray.io/node-id": "x"}}}, "vanilla.node_labels: "
     "Custom label keys `ray.io/node-id` cannot start with the prefix `ray.io/`"),
    ({**_spec(), "speculative": {**_spec()["speculative"], "node_labels": {"pool": "a b"}}},
     "speculative.node_labels: Invalid label key value `a b`"),
    ({**_spec(), "vanilla": {"accelerator": "gpu", "tensor_parallel_size": 4,
                             "placement_strategy": "PACK"}, "autoscaling": {"enabled": False}},
     "vanilla.placement_strategy: PACK may split the 4 tensor-parallel ranks"),
    ({**_spec(), "router": {"speculative_tasks": ["poetry"]}}, "router.speculative_tasks.0"),
    ({**_spec(), "server": {"max_in_flight_per_replica": 32}},
     "server.max_sequences_per_request: 64 is above max_in_flight_per_replica 32"),
    ({**_spec(), "server": {"max_sequences_per_request": 0}}, "server.max_sequences_per_request"),
    ({**_spec(), "server": {"api_keys_env": "K", "admin_api_keys_env": "K"}},
     "server.admin_api_keys_env: must differ from api_keys_env"),
    ({**_spec(), "server": {"admin_api_keys_env": "no-dashes"}}, "server.admin_api_keys_env"),
    ({**_spec(), "kubernetes": {"ray_token_auth": False, "ray_auth_secret": "s"}},
     "kubernetes.ray_auth_secret: set, but ray_token_auth is false"),
    ({**_spec(), "kubernetes": {"ray_version": "2.51.0", "image": "rayproject/ray:2.51.0"}},
     "kubernetes.ray_token_auth: needs ray_version >= 2.52.0, got '2.51.0'"),
    # configs vLLM refuses at engine start (each message names the field and both values)
    (_spec(max_model_len=2048),
     "speculative.speculator.max_model_len: 2048 is above model.max_model_len 1024"),
    ({"speculative": {"speculator": {"method": "draft_model", "model": "/d",
                                     "draft_tensor_parallel_size": 2},
                      "accelerator": "gpu", "tensor_parallel_size": 4}},
     "speculative.speculator.draft_tensor_parallel_size: 2 must equal "
     "speculative.tensor_parallel_size 4 for method 'draft_model'"),
    ({"speculative": {"speculator": {"method": "eagle3", "model": "/d",
                                     "draft_tensor_parallel_size": 2},
                      "accelerator": "gpu", "tensor_parallel_size": 4}},
     "speculative.speculator.draft_tensor_parallel_size: 2 must be 1 or "
     "speculative.tensor_parallel_size 4"),
    ({"speculative": {"speculator": {"method": "ngram", "draft_tensor_parallel_size": 1}}},
     "speculative.speculator.draft_tensor_parallel_size: must be unset for method 'ngram'"),
    ({**_spec(), "vanilla": {"max_num_seqs": 5000}},
     "vanilla.max_num_seqs: 5000 is above vLLM's max_num_batched_tokens 2048"),
])
def test_bad_config_names_the_field(data, field):
    with pytest.raises(ConfigError) as e:
        SpecserveConfig.from_dict(data)
    assert field in str(e.value)


def test_gpu_pool_takes_tensor_parallel_4():
    cfg = SpecserveConfig.from_dict({**_spec(), "vanilla": {"accelerator": "gpu",
                                                             "tensor_parallel_size": 4}})
    assert cfg.vanilla.tensor_parallel_size == 4


def test_bad_yaml_file_is_a_config_error(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("model: [unclosed")
    with pytest.raises(ConfigError, match="c.yaml"):
        SpecserveConfig.from_yaml(f)


@pytest.mark.parametrize("text, line", [
    ("router:\n  pin: auto\nserver:\n  port: 8000\nrouter:\n  pin: vanilla\n", 5),
    ("vanilla:\n  num_replicas: 1\n  num_replicas: 2\n", 3),
])
def test_a_repeated_key_is_a_config_error_naming_it(tmp_path, text, line):
    """PyYAML keeps the last of two equal keys silently: the first block would be lost."""
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=rf"(?s)c.yaml: .*duplicate key '\w+'.*line {line}"):
        SpecserveConfig.from_yaml(f)


def test_a_merge_key_may_be_overridden():
    import yaml

    from core.config import _UniqueKeyLoader
    data = yaml.load("a: &p {n: 2, m: 8}\nb:\n  <<: *p\n  n: 1\n", Loader=_UniqueKeyLoader)
    assert data["b"] == {"n": 1, "m": 8}


def _checkpoint(path, vocab):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    return str(path)


def test_draft_with_other_vocab_is_refused_naming_both_sizes(tmp_path):
    target, draft = _checkpoint(tmp_path / "t", 4096), _checkpoint(tmp_path / "d", 5000)
    cfg = SpecserveConfig.from_dict({"model": {"path": target}, **_spec(model=draft)})
    with pytest.raises(ConfigError) as e:
        check_speculator_matches_target(cfg)
    assert "5000" in str(e.value) and "4096" in str(e.value)
    assert "speculative.speculator.model" in str(e.value)


def test_draft_with_same_vocab_passes(tmp_path):
    target, draft = _checkpoint(tmp_path / "t", 4096), _checkpoint(tmp_path / "d", 4096)
    cfg = SpecserveConfig.from_dict({"model": {"path": target}, **_spec(model=draft)})
    check_speculator_matches_target(cfg)  # no error


def test_draft_sample_method_passes_through_for_draft_methods_only():
    from core import SpeculatorConfig

    spec = SpeculatorConfig(method="draft_model", model="/m", draft_sample_method="probabilistic")
    assert spec.to_vllm()["draft_sample_method"] == "probabilistic"
    assert "draft_sample_method" not in SpeculatorConfig(method="eagle3", model="/m").to_vllm()
    with pytest.raises(ValueError, match="draft_sample_method: only for draft_model"):
        SpeculatorConfig(method="ngram", draft_sample_method="probabilistic")
@pytest.mark.parametrize("speculator, ok", [
    ({"method": "draft_model", "draft_tensor_parallel_size": 4}, True),
    ({"method": "eagle3", "draft_tensor_parallel_size": 1}, True),
    ({"method": "eagle3", "draft_tensor_parallel_size": 4}, True),
    ({"method": "draft_model", "draft_tensor_parallel_size": 1}, False),
])
def test_draft_tensor_parallel_rule_of_vllm(speculator, ok):
    data = {"speculative": {"speculator": {"model": "/d", **speculator}, "accelerator": "gpu",
                            "tensor_parallel_size": 4}}
    if ok:
        SpecserveConfig.from_dict(data)
    else:
        with pytest.raises(ConfigError, match="draft_tensor_parallel_size"):
            SpecserveConfig.from_dict(data)


def _llama(path, **config):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"vocab_size": 4096, "num_attention_heads": 4,
                                                  "max_position_embeddings": 1024, **config}))
    return str(path)


@pytest.mark.parametrize("target, draft, fields, message", [
    ({"max_position_embeddings": 512}, {}, {"model": {"max_model_len": 1024}},
     "model.max_model_len: 1024 is above the target checkpoint's max_position_embeddings 512"),
    ({}, {"max_position_embeddings": 512}, {"speculator": {"max_model_len": 1024}},
     "speculative.speculator.max_model_len: 1024 is above the speculator checkpoint's "
     "max_position_embeddings 512"),
    ({}, {"num_heads": 5}, {"speculator": {"method": "medusa", "num_speculative_tokens": 6}},
     "speculative.speculator.num_speculative_tokens: 6 is above the Medusa checkpoint's "
     "num_heads 5"),
])
def test_checkpoint_that_cannot_host_the_config_is_refused(tmp_path, target, draft, fields,
                                                          message):
    cfg = SpecserveConfig.from_dict({
        "model": {"path": _llama(tmp_path / "t", **target), **fields.get("model", {})},
        "speculative": {"speculator": {"method": "draft_model", "model": _llama(
            tmp_path / "d", **draft), **fields.get("speculator", {})}}})
    with pytest.raises(ConfigError) as e:
        check_checkpoints(cfg)
    assert message in str(e.value)


def test_checkpoints_that_fit_pass(tmp_path):
    target, draft = _llama(tmp_path / "t"), _llama(tmp_path / "d")
    cfg = SpecserveConfig.from_dict({"model": {"path": target}, "speculative": {"speculator": {
        "method": "draft_model", "model": draft, "max_model_len": 1024}}})
    check_checkpoints(cfg)  # no error: every bound met exactly


def test_tensor_parallel_across_nodes_only_when_asked():
    gpu = {"accelerator": "gpu", "tensor_parallel_size": 4}
    cfg = SpecserveConfig.from_dict({**_spec(), "autoscaling": {"enabled": False},
                                     "vanilla": gpu})
    assert cfg.vanilla.placement_strategy == "STRICT_PACK"
    cfg = SpecserveConfig.from_dict({**_spec(), "autoscaling": {"enabled": False}, "vanilla": {
        **gpu, "placement_strategy": "PACK", "tensor_parallel_across_nodes": True}})
    assert cfg.vanilla.placement_strategy == "PACK"


@pytest.mark.parametrize("engine_kwargs, named", [
    ({"stream_interval": 0}, "vanilla.engine_kwargs.stream_interval: Input should be greater "
                             "than or equal to 1"),
    ({"max_num_seq": 8}, "vanilla.engine_kwargs.max_num_seq: not a vLLM"),
    ({"stream_interval": 8}, None),
])
def test_validate_checks_engine_arguments_as_serve_does(tmp_path, capsys, engine_kwargs, named):
    """`specserve validate` refuses what `serve` would refuse before any replica starts: an
    engine argument vLLM does not have, or a number outside vLLM's bound for it."""
    import yaml

    from cluster.cli import main

    data = yaml.safe_load(Path(DEFAULT_CONFIG_PATH).read_text())
    data["vanilla"]["engine_kwargs"] = engine_kwargs
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(data))
    code = main(["validate", "--config", str(f)])
    out, err = capsys.readouterr()
    if named:
        assert code == 2 and named in err and not out
    else:
        assert code == 0 and '"stream_interval": 8' in out
