"""The benchmark's pure parts: workload, percentiles, acceptance from histograms, goodput, report."""

import itertools
import json

import pytest

from bench.client import Sample
from bench.report import write_report
from bench.summary import Slo, acceptance, percentile, summarize
from bench.workload import MEAN_OUTPUT_TOKENS, TEMPERATURE, jobs


def test_workload_is_seeded_and_mixes_every_task():
    a = [j.body for j in itertools.islice(jobs("mixed", "m", seed=3), 200)]
    b = [j.body for j in itertools.islice(jobs("mixed", "m", seed=3), 200)]
    assert a == b
    got = list(itertools.islice(jobs("mixed", "m", seed=3), 200))
    assert {j.task for j in got} == set(TEMPERATURE)
    for j in got:
        assert j.body["temperature"] == TEMPERATURE[j.task]
        assert 0.5 * MEAN_OUTPUT_TOKENS[j.task] - 1 <= j.body["max_tokens"] \
            <= 1.5 * MEAN_OUTPUT_TOKENS[j.task] + 1
        assert ("messages" in j.body) == (j.path == "/v1/chat/completions")


def test_code_workload_is_code_completions_only():
    got = list(itertools.islice(jobs("code", "m", route="vanilla"), 50))
    assert {(j.task, j.path, j.body["route"]) for j in got} == {
        ("code", "/v1/completions", "vanilla")}
    with pytest.raises(ValueError, match="workload"):
        next(jobs("poetry", "m"))


def test_percentile_interpolates_like_numpy():
    assert percentile([], 50) is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99
    assert percentile([5.0], 99) == 5.0


def test_acceptance_from_histograms():
    # 10 steps: 2 accepted none, 3 accepted one, 5 accepted both (k = 2).
    a = acceptance([[1, 1, 2], [1, 2, 3], []])
    assert a["steps"] == 10
    assert a["alpha"] == pytest.approx([8 / 10, 5 / 8])
    assert a["mean_acceptance_length"] == pytest.approx(1 + (3 + 10) / 10)
    assert acceptance([[], []]) is None


def test_summary_goodput_counts_only_requests_within_the_slo():
    fast = Sample("code", ok=True, ttft_s=0.1, latency_s=1.1, completion_tokens=101,
                  itl_s=[0.01] * 100, route="speculative", acceptance_histogram=[1, 0, 3])
    slow = Sample("chat", ok=True, ttft_s=2.0, latency_s=3.0, completion_tokens=11,
                  itl_s=[0.1] * 10, route="vanilla")
    failed = Sample("math", error="500: boom")
    s = summarize([fast, slow, failed], wall_s=2.0, slo=Slo(ttft_s=1.0, tpot_s=0.05))
    assert (s["requests"], s["errors"], s["first_error"]) == (3, 1, "500: boom")
    assert s["output_tok_s"] == pytest.approx(112 / 2.0)
    assert s["goodput_req_s"] == pytest.approx(0.5) and s["slo_attainment"] == 0.333
    assert s["route_mix"] == {"speculative": 1, "vanilla": 1}
    assert s["tpot_p50_ms_by_task"] == {"code": 10.0, "chat": 100.0}
    assert s["acceptance"]["code"]["mean_acceptance_length"] == pytest.approx(1 + 6 / 4)


def test_report_states_each_target(tmp_path):
    def cell(tok_s, goodput, route="vanilla"):
        return summarize([Sample("code", ok=True, ttft_s=0.1, latency_s=1.0, completion_tokens=10,
                                 route=route)], 10 / tok_s, Slo(1, 1)) | {
            "goodput_req_s": goodput}

    def systems(v2, s2, r, fv, fs):
        return {"vanilla-x2": cell(v2, 1.0), "speculative-ngram-x2": cell(s2, 1.2),
                "routed": cell(r, 1.5, "speculative"), "forced-vanilla": cell(fv, 0.8),
                "forced-speculative": cell(fs, 0.9, "speculative")}
    results = {"command": "python -m bench.run", "machine": {"cpus": 2}, "wall_s": 1, "budget": 2,
               "apps": {"vanilla-x2": {"start_s": 60}}, "slo": {"ttft_ms": 1000, "tpot_ms": 50},
               "overhead": {"requests": 10, "concurrency": 64, "overhead_p50_ms": 0.5,
                            "overhead_p99_ms": 1.5, "specserve_p50_ms": 10,
                            "specserve_p99_ms": 12, "direct_p50_ms": 9.5, "direct_p99_ms": 10.5},
               "speedup_curve": {"min_speedup": 1.1, "tasks": {
                   "code": {"pays_up_to_batch": 8, "curve": [
                       {"batch": 1, "vanilla_step_ms": 10, "speculative_step_ms": 12,
                        "expected_tokens": 3.0, "speedup": 2.5},
                       {"batch": 64, "vanilla_step_ms": 100, "speculative_step_ms": 400,
                        "expected_tokens": 3.0, "speedup": 0.75}]},
                   "chat": {"pays_up_to_batch": 0, "curve": []}}},
               "cells": {"code@c1": systems(100, 300, 250, 100, 300),
                         "mixed@c1": systems(100, 200, 190, 100, 200),
                         "mixed@c16": systems(800, 500, 1040, 450, 400),
                         "mixed@c64": systems(1000, 600, 900, 500, 300),
                         "poisson@1.00": systems(1, 1, 1, 1, 1),
                         "machine@c16": {"one-pool": cell(450, 1), "both-pools": cell(810, 1)}}}
    write_report(json.loads(json.dumps(results)), tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "both pools busy / one pool alone = **1.80x**" in text
    assert "mixed c1: routed / better own pool = **0.95x** (forced-speculative" in text
    assert "mixed c16: routed / better own pool = **2.31x**" in text
    assert "routed / best at equal budget = **1.30x** (vanilla-x2, target ≥ 0.95)" in text
    assert "mixed c64: routed / better own pool = **1.80x** (forced-vanilla, target ≥ 1.3" in text
    assert "routed / best at equal budget = **0.90x** (vanilla-x2, target report)" in text
    assert "**1.30x** at mixed@c16 (target ≥ 1.15 somewhere)" in text
    assert "routed / vanilla-x2 tok/s = **2.50x**" in text
    assert "routed goodput / best at equal budget = **1.25x** (speculative-ngram-x2" in text
    assert "64 at a time): p50 0.5 ms, p99 1.5 ms" in text
    assert "| 64 | 100.0 | 400.0 | 0.75 |" in text
    assert "pays (S ≥ 1.1) up to batch: code 8, chat 0" in text
    for png in ("throughput.png", "tpot_p99.png", "speedup_by_task.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_contention_table_fits_the_slowdown_beside_the_joint_batch_model():
    from bench.contention import predictions
    result = {"alone": {"vanilla": {"4": {"tok_s": 570.0}, "5": {"tok_s": 674.0}},
                        "speculative": {"1": {"tok_s": 266.0}, "5": {"tok_s": 673.0}}},
              "joint": [{"vanilla_streams": 4, "speculative_streams": 1,
                         "vanilla": {"tok_s": 225.5}, "speculative": {"tok_s": 92.3}}]}
    rows = predictions(json.loads(json.dumps(result)))  # keys as results.json holds them
    assert rows == [{"cell": "4+1", "vanilla_tok_s": 225.5, "speculative_tok_s": 92.3,
                     "total_tok_s": 317.8, "joint_batch_model_tok_s": round((4 * 674 + 673) / 5, 1),
                     "slowdown": round((570 + 266) / 317.8, 2)}]


def test_draft_length_prompts_are_interleaved_and_the_splits_disjoint():
    from bench.draft_length import prompts
    from models.speculators_report import TASKS

    dev, test = prompts("dev", 3), prompts("test", 3)
    assert [r["task"] for r in dev[:len(TASKS)]] == list(TASKS)  # the mix from the first batch on
    assert len(dev) == len(test) == 3 * len(TASKS)
    assert not {r["prompt"] for r in dev} & {r["prompt"] for r in test}
