"""Speculator heads against the config (pure): a head whose vocabulary is not the target's is
refused. Training, vLLM layouts and losslessness: tests/integration/test_heads_live.py."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("method", ["eagle3", "medusa"])
def test_config_refuses_head_with_other_vocab(tmp_path, method):
    from core import ConfigError, SpecserveConfig, check_speculator_matches_target
    for name, vocab in (("t", 4096), ("h", 5000)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    cfg = SpecserveConfig.from_dict({"model": {"path": str(tmp_path / "t")}, "speculative": {
        "speculator": {"method": method, "model": str(tmp_path / "h")}}})
    with pytest.raises(ConfigError, match="5000"):
        check_speculator_matches_target(cfg)
