"""The benchmark's interleaved blocks (bench/cells.py, bench/serve_client.py): how a cell is cut,
the order the systems take turns in, and a cell's figures computed over its blocks as one run."""

import asyncio
import itertools
import time
import types
from collections import Counter

import numpy as np
import pytest
from vllm.benchmarks.serve import SpecDecodeMetrics

from bench import cells
from bench.serve_client import Block, Load, figures, merged_result, sample_requests
from bench.summary import Slo
from bench.workload import jobs

SLO = Slo(ttft_s=0.2, tpot_s=0.012)


def vllm_block(ttfts: list[float], lens: list[int], tpot_s: float, duration: float,
               errors: list[str] | None = None, **kw) -> Block:
    """A block whose result has the per-request lists `vllm.benchmarks.serve.benchmark` returns:
    request i has TTFT `ttfts[i]`, `lens[i]` output tokens `tpot_s` apart (a failed one: 0)."""
    errors = errors or [""] * len(lens)
    itls = [[tpot_s] * max(n - 1, 0) for n in lens]
    r = {"duration": duration, "errors": errors, "output_lens": lens, "ttfts": ttfts,
         "latencies": [t + tpot_s * max(n - 1, 0) for t, n in zip(ttfts, lens)], "itls": itls,
         "input_lens": [7] * len(lens), "start_times": [0.0] * len(lens),
         "generated_texts": ["x"] * len(lens), "output_throughput": sum(lens) / duration}
    return Block(r, [None] * len(lens), kw.get("tasks"), kw.get("routes", Counter()),
                 kw.get("cpu", {}), kw.get("wall_s", duration), kw.get("spec", (None, None)))


def test_blocks_pool_their_requests_as_one_run():
    a = vllm_block([0.1, 0.3], [11, 21], 0.01, duration=2.0)
    b = vllm_block([0.05, 0.1, 0.4], [31, 1, 0], 0.02, duration=3.0,
                   errors=["", "", "boom"])
    r = merged_result([a, b], SLO, tokenizer=None)
    assert r["duration"] == 5.0 and r["failed"] == 1
    assert r["output_throughput"] == pytest.approx((11 + 21 + 31 + 1) / 5.0)
    ttfts = [0.1, 0.3, 0.05, 0.1]  # the failed request counts in no percentile
    assert r["p99_ttft_ms"] == pytest.approx(1000 * np.percentile(ttfts, 99))
    # TPOT over requests with more than one token; ITL over every gap
    assert r["p50_tpot_ms"] == pytest.approx(1000 * np.percentile([0.01, 0.01, 0.02], 50))
    assert r["p99_itl_ms"] == pytest.approx(1000 * np.percentile([0.01] * 30 + [0.02] * 30, 99))
    # good: TTFT <= 0.2 s and TPOT <= 12 ms -> the first and the 1-token request (TPOT 0)
    assert r["request_goodput"] == pytest.approx(2 / 5.0)
    one = merged_result([a], SLO, tokenizer=None)
    assert one["output_throughput"] == pytest.approx(16.0)


def test_a_cells_figures_sum_routes_acceptance_and_cpu_over_its_blocks():
    spec = lambda d, t, a: SpecDecodeMetrics(d, t, a, {})  # noqa: E731
    a = vllm_block([0.1], [11], 0.01, duration=2.0, tasks=["code"], wall_s=2.0,
                   routes=Counter({("speculative", "code", "speculation_pays"): 1}),
                   cpu={"engines": 2.0, "router": 0.5}, spec=(spec(0, 0, 0), spec(10, 40, 30)))
    b = vllm_block([0.1], [21], 0.01, duration=3.0, tasks=["chat"], wall_s=3.0,
                   routes=Counter({("vanilla", "chat", "speculation_costs"): 1}),
                   cpu={"engines": 3.0}, spec=(spec(10, 40, 30), spec(20, 80, 40)))
    s = figures([a, b], SLO, tokenizer=None)
    assert s["requests"] == 2 and s["output_tok_s"] == pytest.approx(32 / 5.0, abs=0.05)
    assert s["route_mix"] == {"speculative": 1, "vanilla": 1}
    assert s["tpot_p50_ms_by_task"] == {"code": 10.0, "chat": 10.0}
    assert s["cpu"] == {"engines": 1.0, "router": 0.1}  # CPU seconds over 5 wall seconds
    # 40 accepted of 80 drafted tokens in 20 drafts
    assert s["acceptance"] == {"acceptance_rate": 50.0, "mean_acceptance_length": 3.0,
                               "num_drafts": 20}
    with pytest.raises(ValueError, match="no blocks"):
        figures([], SLO, tokenizer=None)


@pytest.mark.parametrize("blocks, n, load, want", [
    (4, 64, Load(concurrency=4), 4), (4, 64, Load(concurrency=16), 2),
    (4, 16, Load(concurrency=16), 1), (1, 512, Load(concurrency=4), 1),
    (8, 40, Load(rate_req_s=2.0), 1), (3, 1, Load(concurrency=1), 1)])
def test_a_block_holds_at_least_two_requests_per_slot_and_poisson_cells_stay_whole(
        blocks, n, load, want):
    assert cells.block_count(blocks, [None] * n, load) == want


def test_the_systems_take_turns_block_by_block(monkeypatch):
    sent: list[tuple[str, list[str]]] = []

    async def run_block(url, model, requests, load, slo, tokenizer, tasks):
        route = requests[0].request_overrides["route"]
        sent.append((route, [r.prompt for r in requests]))
        return vllm_block([0.1] * len(requests), [10] * len(requests), 0.01,
                          duration=1.0 + len(sent), tasks=tasks)

    async def nothing(*a, **k):
        return None

    monkeypatch.setattr(cells, "run_block", run_block)
    monkeypatch.setattr(cells, "warm_up", nothing)
    def speedup_curves(url, context=None):  # tagged with the blocks sent when it was read
        return {"0.0": {"sent": len(sent), "host_sharing": {"sent": len(sent)}}}
    monkeypatch.setattr(cells, "speedup_curves", speedup_curves)
    monkeypatch.setattr(cells, "predicted_s",
                        lambda curves, batch: {"sent": curves["0.0"]["sent"], "batch": batch})
    sent_at: dict[int, float] = {}  # blocks sent: when the routed system's first block started
    def step_samples(url, since):
        return [{"sent": len(sent), "since": since}]
    monkeypatch.setattr(cells, "step_samples", step_samples)
    real_run_block = run_block
    async def run_block_timed(*a, **k):
        sent_at.setdefault(len(sent), time.time())
        return await real_run_block(*a, **k)
    monkeypatch.setattr(cells, "run_block", run_block_timed)
    app = types.SimpleNamespace(systems={"routed": "auto", "forced-vanilla": "vanilla",
                                         "forced-speculative": "speculative"})
    args = types.SimpleNamespace(ttft_slo_ms=1000, tpot_slo_ms=50, workload="mixed", warmup=0,
                                 code_requests=6, concurrency=[2], min_requests=12,
                                 requests_per_slot=1, blocks=3, poisson_requests=0,
                                 long_tokens=0)
    got = asyncio.run(cells.measure_app("http://x", app, args, None, "m", tokenizer=None))
    routes = [route for route, _ in sent]
    # code@c1: 6 requests, 3 blocks; each block starts with the next system
    assert routes[:9] == ["auto", "vanilla", "speculative", "vanilla", "speculative", "auto",
                          "speculative", "auto", "vanilla"]
    # the next cell starts with the next system; blocks of 12 requests at c2: 3
    assert routes[9:12] == ["vanilla", "speculative", "auto"] and len(sent) == 18
    # each system's cell deals its requests: request i to block i mod 3, each sent once
    for route in ("auto", "vanilla", "speculative"):
        full = [r.prompt for r in sample_requests(itertools.islice(jobs("code", "m", 1, route),
                                                                   6))]
        assert [ps for r, ps in sent[:9] if r == route] == [full[0::3], full[1::3], full[2::3]]
    row = got["code@c1"]
    assert list(row) == ["routed", "forced-vanilla", "forced-speculative"]
    assert row["routed"]["requests"] == 6 and len(row["routed"]["blocks_tok_s"]) == 3
    # one run of 6 x 10 tokens over the three blocks' durations
    durations = [1.0 + i for i, (r, _) in enumerate(sent[:9], 1) if r == "auto"]
    assert row["routed"]["output_tok_s"] == pytest.approx(60 / sum(durations), abs=0.05)
    # the S it priced the cell with and ρ: read right after routed's last block (the 8th sent)
    assert row["routed"]["predicted_s"] == {"sent": 8, "batch": 1}
    assert row["routed"]["host_sharing"] == {"sent": 8}
    # the router's samples since the routed system's first block (the first sent), read with it
    [samples] = row["routed"]["step_samples"]
    assert samples["sent"] == 8 and samples["since"] <= sent_at[0]
    assert "predicted_s" not in row["forced-vanilla"]
    assert len(got["mixed@c2"]["routed"]["blocks_tok_s"]) == 3


def test_the_report_gives_routed_over_the_better_forced_pool_block_by_block():
    from bench.report import _blocks, _blocks_said

    def runs(*blocks_per_round):
        return [{"output_tok_s": sum(b) / len(b), "blocks_tok_s": list(b)}
                for b in blocks_per_round]
    cells_ = {"mixed@c4": {"routed": runs((90, 110), (100, 100)),
                           "forced-vanilla": runs((50, 50), (50, 50)),
                           "forced-speculative": runs((100, 100), (80, 125))},
              "mixed@c8": {"routed": [{"output_tok_s": 1.0}],  # whole cells: no row
                           "forced-vanilla": [{"output_tok_s": 1.0}]}}
    lines = _blocks(cells_)
    # forced-speculative (median 101.25) beats forced-vanilla; blocks 0.9, 1.1, 1.25, 0.8; whole
    # cells 100 / 100 and 100 / 102.5
    assert "| mixed@c4 | 2 | 1.00 [0.80-1.25] | 0.99 [0.98-1.00] | forced-speculative |" in lines
    assert not any("mixed@c8" in line for line in lines)
    assert _blocks({"mixed@c8": cells_["mixed@c8"]}) == []
    assert _blocks_said(1) == "" and "up to 4 interleaved blocks" in _blocks_said(4)


def test_host_noise_reports_each_loop_against_its_median_and_refuses_bad_flags(capsys):
    from bench.host_noise import describe, main

    lines = describe({"compute": [100.0, 98.0, 102.0], "llc_27MiB": [80.0, 100.0, 60.0, 100.0]})
    assert lines[0].startswith("compute      3 samples, median     100.0/s, [0.98-1.02]x")
    assert lines[0].endswith("0 more than 10% below it")
    assert "median      90.0/s, [0.67-1.11]x the median; 2 more than 10% below it" in lines[1]
    for argv, named in ((["--seconds", "0"], "--seconds: must be positive"),
                        (["--core", "4096"], "--core: 4096 is not one of this process's cores")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and named in capsys.readouterr().err
