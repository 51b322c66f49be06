"""Config validation: strict, every error names its field (../shared/cases #6 for vocab)."""

import json

import pytest

from cluster.config import (DEFAULT_CONFIG_PATH, ConfigError, SpecserveConfig,
                            check_speculator_matches_target)


def _spec(**speculator):
    return {"speculative": {"speculator": {"method": "draft_model", "model": "/d", **speculator}}}


def test_default_config_loads_and_renders_speculative_config():
    cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    vllm = cfg.speculative.speculator.to_vllm()
    assert vllm["method"] == "draft_model"
    assert vllm["num_speculative_tokens"] == 4
    assert vllm["model"].endswith("/draft") and "${models}" not in vllm["model"]


@pytest.mark.parametrize("data, field", [
    ({**_spec(), "bogus": 1}, "bogus"),
    (_spec(num_speculative_tokens=0), "speculative.speculator.num_speculative_tokens"),
    (_spec(method="medusa2"), "speculative.speculator.method"),
    ({"speculative": {"speculator": {"method": "eagle3"}}}, "model: required for method 'eagle3'"),
    ({"speculative": {"speculator": {"method": "ngram", "model": "/x"}}}, "model: must be unset"),
    ({**_spec(), "vanilla": {"tensor_parallel_size": 4}}, "vanilla.tensor_parallel_size"),
    ({**_spec(), "server": {"port": 70000}}, "server.port"),
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
    from cluster.config import SpeculatorConfig

    spec = SpeculatorConfig(method="draft_model", model="/m", draft_sample_method="probabilistic")
    assert spec.to_vllm()["draft_sample_method"] == "probabilistic"
    assert "draft_sample_method" not in SpeculatorConfig(method="eagle3", model="/m").to_vllm()
    with pytest.raises(ValueError, match="draft_sample_method: only for draft_model"):
        SpeculatorConfig(method="ngram", draft_sample_method="probabilistic")
