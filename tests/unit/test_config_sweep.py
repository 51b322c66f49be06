"""The batch-size schedule of the speculator (`num_speculative_tokens_per_batch_size`): specserve
refuses exactly what vLLM 0.32's scheduler refuses, by vLLM's own validator (pure). The other
config fields against vLLM's and Serve's start-time checks:
tests/integration/test_config_sweep_live.py.
"""

from __future__ import annotations

import copy

import pytest
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

from core import DEFAULT_CONFIG_PATH, ConfigError, SpecserveConfig
from tests.session_app import DRAFT_SPECULATOR

# The default config with the session application's draft-model speculator: the method most
# checks below concern (its own checkpoint, context and draft tensor parallelism).
BASE = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json", exclude={
    "kubernetes"})
BASE["speculative"]["speculator"] = {**DRAFT_SPECULATOR, "max_model_len": None}


def _data(**changes) -> dict:
    """The default config with `a__b=value` changes (dicts merged into the node)."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = {**node[leaf], **value} if isinstance(value, dict) and isinstance(
            node.get(leaf), dict) else value
    return data


@pytest.mark.parametrize("schedule", [
    [[1, 8, 4], [9, 64, 2], [65, 1024, 0]], [[1, 1, 3]], [[9, 64, 2], [1, 8, 4]],  # valid
    [], [[2, 8, 4]], [[1, 8, 4], [8, 16, 2]], [[1, 8, -1]], [[0, 8, 4]], [[1, 8, 4], [6, 4, 1]],
])
def test_batch_size_schedule_is_refused_exactly_when_vllms_scheduler_refuses_it(schedule):
    """`num_speculative_tokens_per_batch_size`: vLLM checks it when the scheduler starts."""
    try:
        validate_and_normalize_dynamic_sd_schedule(schedule)
        vllm_ok = True
    except ValueError:
        vllm_ok = False
    data = _data(speculative__speculator__num_speculative_tokens_per_batch_size=schedule)
    if vllm_ok:
        SpecserveConfig.from_dict(data)
    else:
        with pytest.raises(ConfigError, match="num_speculative_tokens_per_batch_size"):
            SpecserveConfig.from_dict(data)
