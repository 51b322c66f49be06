"""The batch-size schedule of the speculator (`num_speculative_tokens_per_batch_size`): specserve
refuses exactly what vLLM 0.32's scheduler refuses, by vLLM's own validator (pure). The other
config fields against vLLM's and Serve's start-time checks:
tests/integration/test_config_sweep_live.py.
"""

from __future__ import annotations


import pytest
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

from core import ConfigError, SpecserveConfig
from tests.config_data import config_data



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
    data = config_data(speculative__speculator__num_speculative_tokens_per_batch_size=schedule)
    if vllm_ok:
        SpecserveConfig.from_dict(data)
    else:
        with pytest.raises(ConfigError, match="num_speculative_tokens_per_batch_size"):
            SpecserveConfig.from_dict(data)
