"""The replicas' startup sampling check (deployments/sampling_check.py) and the plugin it relies
on: with specserve's vLLM plugin the CPU expand-kernel fallback is correct, without it (vLLM's
general plugins switched off) the check reports the pool lossy. Each case in a fresh process:
plugins load once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json
import torch, vllm._custom_ops
from deployments.sampling_check import check_sampling
from vllm.utils import cpu_triton_utils
check = check_sampling()
out = torch.full((6,), -1.0)
cpu_triton_utils._expand_kernel_impl(out, torch.tensor([1.0, 0.7, 0.0]),
                                     torch.tensor([2, 5, 6], dtype=torch.int32), 0, 1)
print(json.dumps({"lossless": check.lossless, "detail": check.detail, "expanded": out.tolist()}))
"""


def probe(**env) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_plugin_makes_the_expand_fallback_correct():
    got = probe()
    assert got["lossless"], got["detail"]
    assert got["expanded"] == pytest.approx([1.0, 1.0, 0.7, 0.7, 0.7, 1.0])


def test_without_the_plugin_the_pool_is_reported_lossy():
    got = probe(VLLM_PLUGINS="")  # an allowlist that names no plugin
    assert not got["lossless"], got["detail"]
    assert got["expanded"] != pytest.approx([1.0, 1.0, 0.7, 0.7, 0.7, 1.0])
