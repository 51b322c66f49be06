"""The benchmark's pure parts: workload, percentiles, acceptance from histograms, goodput, report."""

import itertools
import json
from pathlib import Path

import pytest

from bench.report import crossover_band, main as report_main, write_report
from bench.summary import acceptance, percentile
from bench.workload import MEAN_OUTPUT_TOKENS, TEMPERATURE, jobs, main, vllm_custom_rows


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


def test_the_vllm_custom_dataset_is_the_code_cells_prompts(tmp_path):
    rows = vllm_custom_rows("code", 8)
    cell = list(itertools.islice(jobs("code", "m", 1), 8))  # bench.run's code@c1 prompts
    assert rows == [{"prompt": j.body["prompt"], "output_tokens": j.body["max_tokens"]}
                    for j in cell]
    assert main(["--workload", "code", "-n", "8", "--out", str(tmp_path / "c.jsonl")]) == 0
    assert [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()] == rows
    committed = (Path(__file__).parents[2] / "bench/prompts/vllm-code.jsonl").read_text()
    committed = committed.splitlines()
    assert [json.loads(x) for x in committed[:8]] == rows  # README's command reads this file
    # and all of it: the file is the first 64 rows of the code workload (seed 1)
    assert [json.loads(x) for x in committed] == vllm_custom_rows("code", len(committed))
    assert len(committed) == 64


def test_a_workload_without_completion_prompts_is_refused_naming_the_flag(tmp_path, capsys,
                                                                         monkeypatch):
    import bench.workload as workload

    real = workload.jobs
    monkeypatch.setattr(workload, "jobs", lambda *a, **k: (
        j for j in real(*a, **k) if j.path == "/v1/chat/completions"))  # a chat-endpoint-only mix
    with pytest.raises(ValueError, match="'chat' gave 0 completion prompts"):
        vllm_custom_rows("chat", 4)
    with pytest.raises(SystemExit) as e:
        main(["--workload", "chat", "-n", "4", "--out", str(tmp_path / "c.jsonl")])
    assert e.value.code == 2
    assert "--workload: 'chat' gave 0 completion prompts" in capsys.readouterr().err
    assert not (tmp_path / "c.jsonl").exists()


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


def vllm_result(ok_lens: list[int], failed: int = 0, duration: float = 2.0) -> dict:
    """A `vllm.benchmarks.serve.benchmark` result: requests with `ok_lens` output tokens (TTFT
    0.1 s, 10 ms per later token) and `failed` errors."""
    n = len(ok_lens) + failed
    return {"duration": duration, "failed": failed, "output_throughput": sum(ok_lens) / duration,
            "request_goodput": 1 / duration, "errors": [""] * len(ok_lens) + ["boom"] * failed,
            "output_lens": ok_lens + [0] * failed, "ttfts": [0.1] * n,
            "latencies": [0.1 + 0.01 * (k - 1) for k in ok_lens] + [0.0] * failed,
            "p50_ttft_ms": 100.0, "p99_ttft_ms": 150.0, "p50_tpot_ms": 10.0, "p99_tpot_ms": 12.0,
            "p50_itl_ms": 10.0, "p99_itl_ms": 30.0}


def test_cell_figures_come_from_vllms_result_and_the_route_counters():
    from collections import Counter

    from vllm.benchmarks.serve import SpecDecodeMetrics

    from bench.serve_client import acceptance, summary

    routes = Counter({("speculative", "code", "speculation_pays"): 1,
                      ("speculative", "code", "task_gains"): 1,
                      ("vanilla", "chat", "speculation_costs"): 1})
    spec = acceptance(SpecDecodeMetrics(10, 40, 5, {}), SpecDecodeMetrics(50, 200, 105, {}))
    s = summary(vllm_result([101, 11, 31], failed=1), routes, {"engines": 1.5},
                ["code", "chat", "code", "math"], spec)
    assert (s["requests"], s["errors"], s["first_error"]) == (4, 1, "boom")
    assert s["output_tok_s"] == pytest.approx(143 / 2.0)
    assert s["goodput_req_s"] == 0.5 and s["slo_attainment"] == 0.25
    assert (s["ttft_p99_ms"], s["tpot_p50_ms"], s["itl_p99_ms"]) == (150.0, 10.0, 30.0)
    assert s["tpot_p50_ms_by_task"] == {"code": 10.0, "chat": 10.0}
    assert s["route_mix"] == {"speculative": 2, "vanilla": 1}
    assert s["route_mix_by_task"] == {"code": {"speculative": 2}, "chat": {"vanilla": 1}}
    assert s["route_reasons"] == {"speculative/speculation_pays": 1, "speculative/task_gains": 1,
                                  "vanilla/speculation_costs": 1}
    assert s["acceptance"] == {"acceptance_rate": 62.5, "mean_acceptance_length": 3.5,
                               "num_drafts": 40}
    assert acceptance(SpecDecodeMetrics(10, 40, 5, {}), SpecDecodeMetrics(10, 40, 5, {})) is None
    assert s["cpu"] == {"engines": 1.5}
    # no per-chunk latencies in the result: no chunk figures
    assert (s["itl_mean_ms"], s["itl_mean_ms_by_task"], s["tokens_per_chunk_by_task"]) == \
        (None, {}, {})


def test_chunk_figures_give_the_step_a_request_lived_and_its_tokens_per_step():
    from bench.serve_client import chunk_figures

    r = vllm_result([9, 5, 4, 0])
    # code: 8 tokens after the first in 2 chunks of 40 ms (4 per step); chat: 4 in 4 of 10 ms;
    # the third request (code again) 3 tokens in 1 chunk of 70 ms; the fourth produced nothing
    r["itls"] = [[0.04, 0.04], [0.01] * 4, [0.07], []]
    got = chunk_figures(r, [0, 1, 2], ["code", "chat", "code", "chat"])
    assert got["itl_mean_ms"] == pytest.approx(1000 * 0.19 / 7, abs=0.01)
    assert got["itl_mean_ms_by_task"] == {"code": 50.0, "chat": 10.0}
    assert got["tokens_per_chunk_by_task"] == {"code": pytest.approx(11 / 3, abs=1e-3),
                                               "chat": 1.0}
    untasked = chunk_figures(r, [0, 1, 2], None)
    assert untasked["itl_mean_ms"] == got["itl_mean_ms"] and untasked["itl_mean_ms_by_task"] == {}


def test_sample_requests_carry_route_temperature_and_the_endpoint():
    from bench.serve_client import sample_requests

    got = sample_requests(itertools.islice(jobs("mixed", "m", seed=3, route="vanilla"), 40))
    chat = [r for r in got if r.chat_messages is not None]
    assert chat and len(chat) < len(got)  # both endpoints in one run
    for r in got:
        assert r.request_overrides["route"] == "vanilla"
        assert r.request_overrides["temperature"] in TEMPERATURE.values()
        assert r.expected_output_len > 0


def test_report_states_each_target(tmp_path):
    def cell(tok_s, goodput, route="vanilla"):
        s = {"requests": 10, "errors": 0, "wall_s": 10 / tok_s, "output_tok_s": tok_s,
             "goodput_req_s": goodput, "slo_attainment": 1.0, "ttft_p50_ms": 100.0,
             "ttft_p99_ms": 150.0, "tpot_p50_ms": 10.0, "tpot_p99_ms": 12.0,
             "itl_p50_ms": 10.0, "itl_p99_ms": 12.0, "tpot_p50_ms_by_task": {"code": 10.0},
             "route_mix": {route: 10}, "route_mix_by_task": {"code": {route: 10}},
             "route_reasons": {f"{route}/speculation_pays": 10},
             "acceptance": None, "cpu": {"engines": 1.8, "router": 0.1}, "load_avg_1m": 2.0,
             "first_error": ""}
        # three rounds: the median, 5% below, 10% above
        return [s, s | {"output_tok_s": 0.95 * tok_s, "goodput_req_s": 0.95 * goodput},
                s | {"output_tok_s": 1.1 * tok_s, "goodput_req_s": 1.1 * goodput}]

    def systems(v2, s2, r, fv, fs):
        return {"vanilla-x2": cell(v2, 1.0), "speculative-ngram-x2": cell(s2, 1.2),
                "routed": cell(r, 1.5, "speculative"), "forced-vanilla": cell(fv, 0.8),
                "forced-speculative": cell(fs, 0.9, "speculative")}
    results = {"command": "python -m bench.run", "machine": {"cpus": 2}, "wall_s": 1, "budget": 2,
               "apps": {"vanilla-x2": {"start_s": [60, 70, 65]}},
               "slo": {"ttft_ms": 1000, "tpot_ms": 50}, "client": "vllm.benchmarks.serve",
               "engines": "compiled",
               "overhead": {"requests": 10, "concurrency": 64, "overhead_p50_ms": 0.5,
                            "overhead_p99_ms": 1.5, "specserve_p50_ms": 10,
                            "specserve_p99_ms": 12, "direct_p50_ms": 9.5, "direct_p99_ms": 10.5},
               "speedup_curve": {"min_speedup": 1.1, "tasks": {
                   "code": {"pays_up_to_batch": 8, "pays_at_batches": [1, 8, 128], "curve": [
                       {"batch": 1, "vanilla_step_ms": 10, "speculative_step_ms": 12,
                        "expected_tokens": 3.0, "speedup": 2.5},
                       {"batch": 64, "vanilla_step_ms": 100, "speculative_step_ms": 400,
                        "expected_tokens": 3.0, "speedup": 0.75}]},
                   "chat": {"pays_up_to_batch": 0, "curve": []}}},
               "cells": {"code@c1": systems(100, 300, 250, 100, 300),
                         "mixed@c1": systems(100, 200, 190, 100, 200),
                         "mixed@c16": systems(800, 500, 1040, 450, 400),
                         "mixed@c64": systems(1000, 600, 900, 500, 300),
                         "heldout@c8": systems(400, 300, 380, 200, 300),
                         "long@c16": systems(300, 360, 420, 150, 200),
                         "poisson@1.00": systems(1, 1, 1, 1, 1),
                         "machine@c16": {"one-pool": cell(450, 1), "both-pools": cell(810, 1)}}}
    # a fourth round of mixed@c1 in which routed fell behind: its ratio's range straddles 0.95
    for name, runs in results["cells"]["mixed@c1"].items():
        runs.append(runs[0] | ({"output_tok_s": 150} if name == "routed" else {}))
    write_report(json.loads(json.dumps(results)), tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "both pools busy / one pool alone = **1.80x** [1.80-1.80] (met vs ≥ 1.5)" in text
    assert "no frontend, 16 streams on one or half on each: `python -m bench.memory_bus " \
        "--batches 8 16`" in text
    assert ("mixed@c1: routed / better own pool = **0.95x** [0.75-0.95] (open vs ≥ 0.95, "
            "forced-speculative)") in text
    assert "mixed@c16: routed / better own pool = **2.31x** [2.31-2.31] (met vs ≥ 0.95, " \
        "forced-vanilla)" in text
    assert "at equal budget = **1.30x** [1.30-1.30] (met vs ≥ 0.95, vanilla-x2)" in text
    assert "at equal budget = **0.90x** [0.90-0.90] (missed vs ≥ 0.95, vanilla-x2)" in text
    assert "routed / vanilla-x2 tok/s = **2.50x** [2.50-2.50] (met vs ≥ 2.0)" in text
    # issue 30's lines over the whole run: speculative-x2 beats vanilla-x2 at c1, not at c16
    assert ("- routed / best single system at equal budget, every sweep level (≥ 1.0): met at 1 "
            "of 3 levels; not met: mixed@c1 **0.95x** [0.75-0.95], mixed@c64 **0.90x** "
            "[0.90-0.90]") in text
    assert ("- in the crossover band (mixed@c1-mixed@c16: speculative-x2 beats vanilla-x2 at the "
            "first, not at the second): routed / best single system = **1.30x** [1.30-1.30] (met "
            "vs ≥ 1.25) at mixed@c16") in text
    assert ("- routed / better own pool (auto vs forced, same app), every level of the sweeps "
            "(≥ 0.95): met at 4 of 5 levels; not met: mixed@c1 **0.95x** [0.75-0.95]") in text
    assert ("forced-speculative / forced-vanilla tok/s = **3.00x** [3.00-3.00] (met vs ≥ 1.8) on "
            "code at concurrency 1, **0.60x** [0.60-0.60] (met vs ≤ 0.9) at mixed@c64") in text
    assert "routed goodput / best at equal budget = **1.25x** [1.25-1.25] (met vs ≥ 0.95, " \
        "speculative-ngram-x2)" in text
    # the held-out sweep: its own table, its cells judged like the labeled sweep's
    assert ("heldout@c8: routed / better own pool = **1.27x** [1.27-1.27] (met vs ≥ 0.95, "
            "forced-speculative); routed / best at equal budget = **0.95x** [0.95-0.95] (met vs ≥ "
            "0.95, vanilla-x2)") in text
    held = text.split("## Closed-loop sweep, held-out workload")[1].split("##")[0]
    assert "| 8 | 400 [380-440]" in held and "| 16 |" not in held
    assert "| 16 | 1040 [988-1144] (10.0 / 12.0) |" not in text  # the routed column is third
    assert "| 16 | 800 [760-880] (10.0 / 12.0) | 500 [475-550] (10.0 / 12.0) | " \
        "1040 [988-1144] (10.0 / 12.0) |" in text
    assert "vanilla-x2 60 [60-70] s" not in text and "vanilla-x2 65 [60-70] s" in text
    assert "Widest per system: vanilla-x2 ±10%" in text
    assert "Beyond the target: mixed@c1/routed ±" in text
    assert "| mixed@c16 | routed | 1.80 | 0.10 | 2.0 |" in text
    assert "code 10/0" not in text and "code 30/0" in text  # route mix summed over rounds
    assert ("- mixed@c16: {'speculative': 30}; code 30/0; reasons speculative/speculation_pays 10"
            " | speculative/speculation_pays 10 | speculative/speculation_pays 10") in text
    assert "64 at a time): p50 0.5 ms, p99 1.5 ms" in text
    assert "| 64 | 100.0 | 400.0 | 0.75 |" in text
    assert "pays (S ≥ 1.1) at every batch up to: code 8 (also at 128), chat 0" in text
    # predicted S(B = c) against forced-vanilla / forced-speculative TPOT (equal here: S = 1);
    # c16 takes the curve's batch nearest in log2 (64)
    assert "| 1 | code (t=0.0) | - | - | 2.50 | +150% | 1.00 [1.00-1.00] |" in text
    assert "| 16 | code (t=0.0) | - | - | 0.75 | -25% | 1.00 [1.00-1.00] |" in text
    assert "Within ±15%: as routed 0 of 0 cells; after the sweep 0 of 3." in text
    # the long-prompt cell: its own table, judged like the sweep; no curves at its context: no
    # prediction section for it
    assert ("long@c16: routed / better own pool = **2.10x** [2.10-2.10] (met vs ≥ 0.95, "
            "forced-speculative)") in text
    assert "| 16 | 300 [285-330]" in text.split("## Closed-loop sweep, long prompts")[1]
    assert "S(B, L) at their context" not in text
    results["speedup_curves_long"] = {"0.0": {"tasks": {"code": {"curve": [
        {"batch": 16, "speedup": 1.1}]}}}}
    write_report(json.loads(json.dumps(results)), tmp_path)
    long = (tmp_path / "report.md").read_text().split("S(B, L) at their context")[1]
    assert "| 16 | code (t=0.0) | - | - | 1.10 | +10% | 1.00 [1.00-1.00] |" in long
    assert "Within ±15%: as routed 0 of 0 cells; after the sweep 1 of 1." in long
    # the S the router priced each cell with (read after the routed system ran it), round by
    # round: counted against the target beside the S after the sweep
    for i, run in enumerate(results["cells"]["mixed@c1"]["routed"]):
        run["predicted_s"] = {"code": (1.05, 0.9, 1.1, 2.0)[i], "chat": None}
    write_report(json.loads(json.dumps(results)), tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "| 1 | code (t=0.0) | 1.08 [0.90-2.00] | +8% | 2.50 | +150% | 1.00 [1.00-1.00] |" \
        in text
    assert "Within ±15%: as routed 1 of 1 cells; after the sweep 0 of 3." in text
    for png in ("throughput.png", "tpot_p99.png", "speedup_by_task.png"):
        assert (tmp_path / png).stat().st_size > 1000
    # `python -m bench.report DIR` rewrites the same report from the folder's results.json
    (tmp_path / "results.json").write_text(json.dumps(results))
    written = (tmp_path / "report.md").read_text()
    (tmp_path / "report.md").unlink()
    report_main([str(tmp_path)])
    assert (tmp_path / "report.md").read_text() == written


def test_crossover_band_is_where_speculation_stops_beating_vanilla_at_equal_budget():
    def row(v, s):
        return {"vanilla-x2": [{"output_tok_s": v}], "speculative-draft_model-x2":
                [{"output_tok_s": s}], "speculative-ngram-x2": [{"output_tok_s": s / 2}]}
    cells = {"mixed@c1": row(10, 30), "mixed@c4": row(40, 50), "mixed@c16": row(100, 90),
             "mixed@c64": row(200, 300)}
    sweep = [(1, "mixed@c1"), (4, "mixed@c4"), (16, "mixed@c16"), (64, "mixed@c64")]
    assert crossover_band(cells, sweep, 2) == [(4, "mixed@c4"), (16, "mixed@c16")]
    assert crossover_band({k: row(10, 30) for k in cells}, sweep, 2) == []
    assert crossover_band(cells, sweep, 4) == []  # no x4 systems ran


def test_report_rerenders_from_a_results_folder(tmp_path, capsys):
    with pytest.raises(SystemExit):
        report_main([str(tmp_path)])
    assert "dir: " in capsys.readouterr().err


def test_predicted_s_is_read_at_the_tasks_temperature_and_nearest_batch():
    from bench.report import curve_at

    def reply(speedups):
        return {"tasks": {"chat": {"curve": [{"batch": b, "speedup": x}
                                             for b, x in speedups.items()]}}}
    curves = json.loads(json.dumps({"0.0": reply({1: 2.0, 8: 1.5, 64: 0.8}),
                                    "0.7": reply({1: 1.4, 8: 1.0, 64: 0.5})}))
    assert curve_at(curves, "chat", TEMPERATURE["chat"], 4) == 1.0  # log2 4 nearer 8 than 1
    assert curve_at(curves, "chat", 0, 2) == 2.0
    assert curve_at(curves, "chat", 0, 128) == 0.8
    assert curve_at(curves, "chat", 1.0, 1) is None  # no curve at that temperature
    assert curve_at(curves, "code", 0, 1) is None


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


def test_busy_loop_report_gives_routed_over_the_better_forced_route_per_round():
    """bench.busy_loop's report on the committed run: the ratios the README quotes."""
    import json
    from pathlib import Path

    from bench.busy_loop import report, with_window
    from core import DEFAULT_CONFIG_PATH, SpecserveConfig

    run = Path(__file__).parents[2] / "bench/results/2026-12-05-busy-loop/results.json"
    text = report(json.loads(run.read_text()))
    assert ("| mixed@c1 | 0.93 [0.91-0.98] (0.98, 0.93, 0.91) | "
            "1.10 [1.02-1.16] (1.02, 1.16, 1.10) |") in text
    assert "| machine@c16 | 0.73 [0.69-0.94]" in text
    cfg = with_window(SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH), 0.5, eager=True)
    assert (cfg.vanilla.effective_shm_busy_loop_s(),
            cfg.speculative.effective_shm_busy_loop_s()) == (0.5, 0.5)
    assert (cfg.vanilla.num_replicas, cfg.speculative.num_replicas) == (1, 1)


def test_ab_sets_a_pool_field_or_an_engine_argument_on_both_pools():
    from bench.ab import parse_value, with_setting
    from core import DEFAULT_CONFIG_PATH, SpecserveConfig

    base = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    assert [parse_value(t) for t in ("4", "0.002", "true", "fp8")] == [4, 0.002, True, "fp8"]
    cfg = with_setting(base, "stream_interval", 4, eager=False)
    assert (cfg.vanilla.engine_kwargs["stream_interval"],
            cfg.speculative.engine_kwargs["stream_interval"]) == (4, 4)
    assert cfg.vanilla.shm_busy_loop_s is None  # the other settings stay the default's
    cfg = with_setting(base, "shm_busy_loop_s", 0.5, eager=True)
    assert "shm_busy_loop_s" not in cfg.vanilla.engine_kwargs
    assert cfg.speculative.effective_shm_busy_loop_s() == 0.5
    cfg = with_setting(base, "router.max_speculative_temperature", 2.0, eager=True)
    assert cfg.router.max_speculative_temperature == 2.0
    assert cfg.vanilla.engine_kwargs == base.vanilla.engine_kwargs


@pytest.mark.parametrize("argv, named", [
    (["--setting", "shm_busy_loop_s", "--values", "1", "-1"], "shm_busy_loop_s=-1"),
    (["--setting", "stream_intervall", "--values", "1", "4"], "stream_intervall"),
    (["--setting", "stream_interval", "--values", "4", "4"], "distinct"),
    (["--setting", "router.max_speculative_temprature", "--values", "1", "2"],
     "max_speculative_temprature"),
    (["--setting", "router.max_speculative_temperature", "--values", "1", "-1"],
     "router.max_speculative_temperature=-1"),
])
def test_ab_refuses_a_bad_setting_before_it_starts_anything(argv, named, capsys, tmp_path):
    from bench.ab import main

    with pytest.raises(SystemExit) as e:
        main(argv + ["--out", str(tmp_path / "out")])
    assert e.value.code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_ab_report_names_the_setting_and_its_values():
    import json
    from pathlib import Path

    from bench.ab import report

    run = json.loads((Path(__file__).parents[2]
                      / "bench/results/2026-12-05-busy-loop/results.json").read_text())
    run["setting"], run["values"] = "stream_interval", [1, 4]
    run["rounds"] = [{"1": r["1.0"], "4": r["0.002"]} for r in run["rounds"]]
    del run["windows"]
    text = report(run)
    assert text.startswith("# stream_interval: 1 vs 4")
    assert "| mixed@c1 | 0.93 [0.91-0.98] (0.98, 0.93, 0.91) | 1.10 [1.02-1.16]" in text


class CharTokenizer:
    """One token per character (the Hugging Face calls `long_jobs` makes)."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(map(chr, ids))


def test_long_jobs_hold_the_asked_context_of_source_code_half_completions_half_chat():
    from bench.workload import long_jobs

    sources = [("a.py", "def f(x):\n    return x\n" * 100), ("b.py", "import os\n" * 200)]
    got = list(itertools.islice(long_jobs("m", CharTokenizer(), 300, 5, "auto", sources), 200))
    again = list(itertools.islice(long_jobs("m", CharTokenizer(), 300, 5, "auto", sources), 200))
    assert [j.body for j in got] == [j.body for j in again]  # seeded
    assert {j.task for j in got} == {"code", "chat"}
    for j in got:
        assert j.body["temperature"] == TEMPERATURE[j.task]
        if j.task == "code":
            assert j.path == "/v1/completions" and len(j.body["prompt"]) == 300
        else:
            text = j.body["messages"][0]["content"]
            assert j.path == "/v1/chat/completions" and len(text.split("\n\nWhat does")[0]) == 300
    with pytest.raises(ValueError, match="no source holds 5000 tokens"):
        next(long_jobs("m", CharTokenizer(), 5000, sources=sources))


def test_the_long_cells_default_context_leaves_room_for_the_longest_output():
    from bench.run import long_prompt_default

    assert long_prompt_default(1024) == 1024 - 192 - 64
    assert long_prompt_default(32768) == 2048


def test_each_cell_first_drops_the_prefix_caches_retrying_while_a_replica_is_busy(monkeypatch):
    import asyncio

    import httpx

    from bench import serve_client
    answers = iter([409, 409, 200])
    posts = []

    def handler(request):
        posts.append(request.url.path)
        status = next(answers)
        return httpx.Response(status, json={"pools": {"vanilla": {"replicas": 1, "reset": 1}}}
                              if status == 200 else {"error": {"code": status}})

    async def no_wait(_):
        return None
    monkeypatch.setattr(serve_client.asyncio, "sleep", no_wait)

    async def reset(transport, tries=10):
        async with httpx.AsyncClient(base_url="http://x", transport=transport) as client:
            return await serve_client.reset_prefix_caches(client, tries)
    got = asyncio.run(reset(httpx.MockTransport(handler)))
    assert got["pools"]["vanilla"]["reset"] == 1
    assert posts == ["/admin/reset_prefix_cache"] * 3
    with pytest.raises(RuntimeError, match="404"):  # an app without the endpoint: no silent run
        asyncio.run(reset(httpx.MockTransport(lambda r: httpx.Response(404, text="no"))))
    answers = iter([409] * 3)
    with pytest.raises(RuntimeError, match="409"):
        asyncio.run(reset(httpx.MockTransport(handler), tries=3))


def test_each_round_seeds_the_engines_unless_the_config_does():
    from bench.run import seeded
    from core import SpecserveConfig

    base = SpecserveConfig.from_yaml("cluster/default.yaml")
    cfg = seeded(base, 3)
    assert cfg.vanilla.engine_kwargs["seed"] == cfg.speculative.engine_kwargs["seed"] == 3
    assert "seed" not in base.vanilla.engine_kwargs  # the base config is left as it was
    data = base.model_dump(mode="json")
    data["speculative"]["engine_kwargs"]["seed"] = 11
    own = seeded(SpecserveConfig.from_dict(data), 3)
    assert (own.vanilla.engine_kwargs["seed"], own.speculative.engine_kwargs["seed"]) == (3, 11)


def test_step_times_behind_the_predicted_s_against_the_forced_pools():
    from bench.report import predicted_steps, step_times_vs_realized

    curve = [{"batch": 1, "vanilla_step_ms": 35.0, "speculative_step_ms": 40.0,
              "expected_tokens": 3.0, "speedup": 2.6},
             {"batch": 4, "vanilla_step_ms": 46.0, "speculative_step_ms": 90.0,
              "expected_tokens": 3.0, "speedup": 1.5}]
    curves = {"0.0": {"tasks": {"code": {"curve": curve}}}}
    assert predicted_steps(curves, 3) == {"batch": 4, "vanilla_step_ms": 46.0,
                                          "speculative_step_ms": 90.0}
    assert predicted_steps({}, 3) is None

    def runs(tpot, length=None):
        return [{"tpot_p50_ms": tpot, "acceptance": length and {"mean_acceptance_length": length}}]
    cells = {"mixed@c4": {
        "forced-vanilla": runs(34.5), "forced-speculative": runs(27.0, 2.0),
        "routed": [{"predicted_steps": {"batch": 4, "vanilla_step_ms": 40.0,
                                        "speculative_step_ms": 64.8}},
                   {"predicted_steps": None}]}}
    lines = step_times_vs_realized({"speedup_curves": curves}, cells, [(4, "mixed@c4")])
    # vanilla: TPOT is the step; speculative: TPOT × mean acceptance length (27 × 2 = 54 ms)
    assert "| 4 | 40.0 | +16% | 46.0 | +33% | 34.5 | 64.8 | +20% | 90.0 | +67% | 54.0 |" in lines
    # no acceptance counted for the speculative pool: its realized step is unknown
    cells["mixed@c4"]["forced-speculative"] = runs(27.0)
    lines = step_times_vs_realized({"speedup_curves": curves}, cells, [(4, "mixed@c4")])
    assert "| 4 | 40.0 | +16% | 46.0 | +33% | 34.5 | - | - | - | - | - |" in lines
    # with chunk figures, each forced pool's mean inter-chunk latency is its realized step
    cells["mixed@c4"]["forced-vanilla"][0]["itl_mean_ms"] = 32.0
    cells["mixed@c4"]["forced-speculative"][0]["itl_mean_ms"] = 81.0
    lines = step_times_vs_realized({"speedup_curves": curves}, cells, [(4, "mixed@c4")])
    assert "| 4 | 40.0 | +25% | 46.0 | +44% | 32.0 | 64.8 | -20% | 90.0 | +11% | 81.0 |" in lines
    assert any("mean inter-chunk latency" in line for line in lines)


def test_tokens_per_step_behind_the_predicted_s_against_the_forced_speculative_pool():
    from bench.cells import predicted_tokens
    from bench.report import tokens_vs_realized

    curves = {"0.0": {"tasks": {"code": {"curve": [{"batch": 1, "expected_tokens": 3.6},
                                                   {"batch": 4, "expected_tokens": 3.5}]}}}}
    assert predicted_tokens(curves, 4)["code"] == 3.5
    assert predicted_tokens(curves, 4)["chat"] is None  # no curve at chat's temperature
    cells = {"mixed@c4": {
        "forced-vanilla": [{"tokens_per_chunk_by_task": {"code": 1.0, "chat": 1.0}}],
        "forced-speculative": [{"tokens_per_chunk_by_task": {"code": 2.5, "chat": 1.6}}],
        "routed": [{"predicted_tokens": {"code": 3.5, "chat": None}}]}}
    lines = tokens_vs_realized(cells, [(4, "mixed@c4")])
    assert "| 4 | code (t=0.0) | 3.50 | +40% | 2.50 | 1.00 |" in lines
    assert "| 4 | chat (t=0.7) | - | - | 1.60 | 1.00 |" in lines
    del cells["mixed@c4"]["forced-speculative"][0]["tokens_per_chunk_by_task"]
    assert tokens_vs_realized(cells, [(4, "mixed@c4")]) == []  # results before chunk figures


def test_cells_price_each_task_at_its_temperature_and_the_cells_batch():
    from bench.cells import long_context, predicted_s

    def reply(x):
        return {"tasks": {t: {"curve": [{"batch": 1, "speedup": x}, {"batch": 16, "speedup": x / 2}]}
                          for t in ("code", "chat")}}
    curves = {"0.0": reply(2.0), "0.7": reply(1.2)}
    assert predicted_s(curves, 16) == {"code": 1.0, "math": None, "extraction": None,
                                       "chat": 0.6, "creative": None}
    assert long_context(768) == 768 + 80  # half the longest mean output (creative, 160)


def test_a_systems_speculator_keeps_the_configs_own_table_and_switch_replaces_it():
    """bench.run measures the config's own speculator: its `num_speculative_tokens_per_batch_size`
    reaches speculative-xN and routed; vllm-switch's schedule replaces it; another method takes
    the lab's checkpoint without it."""
    from bench.run import speculator_config
    from core import DEFAULT_CONFIG_PATH, SpecserveConfig

    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    data["speculative"]["speculator"]["num_speculative_tokens_per_batch_size"] = [[1, 8, 4],
                                                                                  [9, 64, 2]]
    base = SpecserveConfig.from_dict(data)
    method = base.speculative.speculator.method
    own = speculator_config(base, method, (0, 2), eager=True).speculative.speculator
    assert own.num_speculative_tokens_per_batch_size == [(1, 8, 4), (9, 64, 2)]
    switch = speculator_config(base, method, (0, 2), eager=True, schedule=[[1, 4, 4], [5, 64, 0]])
    assert switch.speculative.speculator.num_speculative_tokens_per_batch_size == [(1, 4, 4),
                                                                                   (5, 64, 0)]
    fixed = speculator_config(base, method, (0, 2), eager=True, fixed_k=True).speculative
    assert fixed.speculator.num_speculative_tokens_per_batch_size is None
    assert fixed.speculator.num_speculative_tokens == own.num_speculative_tokens
    other = "ngram" if method != "ngram" else "draft_model"
    assert speculator_config(base, other, (1, 1), eager=True).speculative.speculator \
        .num_speculative_tokens_per_batch_size is None


def test_each_round_after_the_first_rotates_the_application_order():
    from bench.run import round_order

    apps = ["vanilla", "spec", "routed"]
    assert round_order(apps, 0) == apps  # vanilla first: its cells give the Poisson rates
    orders = [round_order(apps, r) for r in range(3)]
    assert [o[0] for o in orders] == ["vanilla", "spec", "routed"]  # each leads once
    assert [o[-1] for o in orders] == ["routed", "vanilla", "spec"]
    assert all(sorted(o) == sorted(apps) for o in orders)
    assert round_order(apps, 4) == ["spec", "routed", "vanilla"] and apps[0] == "vanilla"
    assert round_order([], 2) == []


def test_ab_report_says_where_the_routed_system_sent_each_task_and_why():
    """The committed temperature-cap run: at c16 both values route creative vanilla, capped by
    `high_temperature`, uncapped by `speculation_costs` (README "The temperature cap")."""
    import json
    from pathlib import Path

    from bench.ab import report, route_summary

    run = json.loads((Path(__file__).parents[2] / "bench/results/2026-12-07-temperature-cap-load"
                      / "results.json").read_text())
    text = report(run)
    assert ("| mixed@c16 | 0.7 | 1 | chat 0/10, code 1/0, creative 0/6, extraction 4/0, math 10/1 "
            "| speculative/speculation_pays 15, vanilla/speculation_costs 11, "
            "vanilla/high_temperature 6 |") in text
    assert ("| mixed@c16 | 2.0 | 2 | chat 0/10, code 1/0, creative 0/6, extraction 4/0, math 10/1 "
            "| vanilla/speculation_costs 17, speculative/speculation_pays 15 |") in text
    assert route_summary({}) == ("-", "-")
    # runs that kept the router's curves get its predictions per value, against the forced pools
    assert "The router's predictions" not in text
    run["speedup_curves"] = [{} for _ in run["rounds"]]
    capped = report(run).split("## The router's predictions with router.max_speculative_"
                               "temperature = 0.7")[1].split("## The router's predictions")[0]
    assert "| 16 | code (t=0.0) | 1.65 [1.47-1.82] | +30% | - | - | 1.26 [1.21-1.31] |" in capped
    assert "| 64 | - | - | - | - | 243.7 | - | - | - | - | 737.3 |" in capped


def test_the_routers_samples_are_shown_per_pool_and_bucket():
    from bench.report import step_samples_by_bucket

    def sample(pool, batch, step, busy, rho):
        return {"pool": pool, "batch": batch, "step_ms": step, "other_busy": busy,
                "slowdown": rho, "folded_ms": step / (rho or 1.0)}
    cells = {"mixed@c4": {"routed": [
        {"step_samples": [sample("vanilla", 3, 40.0, True, 1.25), sample("vanilla", 5, 50.0,
                                                                          True, 1.25)]},
        {"step_samples": [sample("vanilla", 4, 30.0, False, None),
                          sample("speculative", 1, 38.0, False, None)]},
        {"step_samples": None}]}}
    lines = step_samples_by_bucket(cells, [(4, "mixed@c4")])
    # batches 3, 4 and 5 file at bucket 4; ρ over the samples divided by one
    assert "| 4 | vanilla | 4 | 3 | 40.0 | 67% | 1.25 | 32.0 |" in lines
    assert "| 4 | speculative | 1 | 1 | 38.0 | 0% | - | 38.0 |" in lines
    assert step_samples_by_bucket({"mixed@c4": {"routed": [{}]}}, [(4, "mixed@c4")]) == []
