"""vLLM's `num_speculative_tokens_per_batch_size` on a real engine (the lab's tiny target and
draft): each step drafts the γ the table gives at the running batch, the engine reports it per
step at metrics level "detailed" (what deployments/pools.py asks for under a table), and the
router's estimator reads those steps without counting the skipped positions as rejections."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from core import AcceptanceEstimator, SpeculatorConfig, resolve_path
from core.specdecode import draft_tokens_at

pytestmark = pytest.mark.engine

SCHEDULE = [[1, 1, 4], [2, 64, 2]]
PROMPTS = ["def fibonacci(n):\n    ", "import os\nimport sys\n\n\ndef main(argv):\n",
           "class Stack:\n    def __init__(self):\n", "def merge_sort(items):\n    "]


def _per_step(batches: list[list[str]]) -> list[list[dict]]:
    """For each batch of prompts submitted together: each request's `spec_decode_metrics` as
    the response carries it (`to_dict`)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    spec = SpeculatorConfig(method="draft_model", model="${models}/draft",
                            num_speculative_tokens=4, num_speculative_tokens_per_batch_size=SCHEDULE)
    llm = LLM(model=resolve_path("${models}/target"), enforce_eager=True,
              distributed_executor_backend="uni", max_model_len=512, seed=0,
              speculative_config=spec.to_vllm(), per_request_spec_decode_metrics="detailed")
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    return [[o.outputs[0].spec_decode_metrics.to_dict() for o in llm.generate(batch, params)]
            for batch in batches]


def test_each_step_drafts_the_tables_gamma_and_the_estimator_reads_it(lab):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        alone, together = pool.apply(_per_step, ([PROMPTS[:1], PROMPTS],))
    k = 4
    (one,) = alone
    assert one["per_step_drafted"] and set(one["per_step_drafted"]) == {
        draft_tokens_at(SCHEDULE, k, 1)}
    for metrics in together:  # four at once: batch 4 from the first decode step
        drafted = metrics["per_step_drafted"]
        assert drafted[0] == draft_tokens_at(SCHEDULE, k, 4) == 2
        assert max(drafted) <= k and len(drafted) == len(metrics["per_step_accepted"])
        assert sum(metrics["acceptance_histogram"]) == len(drafted)
    est = AcceptanceEstimator(k, prior_steps=1)
    for metrics in together:
        est.observe("code", 0.0, metrics["acceptance_histogram"],
                    drafted=metrics["per_step_drafted"], accepted=metrics["per_step_accepted"])
    reached_3 = sum(1 for m in together for d, a in zip(m["per_step_drafted"],
                                                         m["per_step_accepted"]) if d > 2 and a >= 2)
    assert est.local_counts()["code|t0"][1][2] == pytest.approx(reached_3)
