"""vLLM's own client against the session application: `vllm bench serve`, run as users run it (the
venv's `vllm` command, deployments/vllm_plugin/specserve_vllm_cli.py), reads speculative-decoding
acceptance from the endpoint's `/metrics` (`vllm:spec_decode_*`, router/metrics.py) and what it
prints is the speculative pool's acceptance."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import resolve_path

NUM_PROMPTS = 16


def _speculative_counters(client) -> dict[str, float]:
    """specserve's own counters of the speculative pool (summed over its replicas)."""
    out = {}
    for line in client.get("/metrics").text.splitlines():
        for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            if line.startswith(f'specserve_spec_decode_{name}_total{{pool="speculative"}}'):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def test_vllm_bench_serve_prints_the_speculative_pools_acceptance(client, server, serve_config,
                                                                  tmp_path):
    vllm = Path(sys.executable).with_name("vllm")
    time.sleep(2)  # counts of earlier tests reach the board (the pools push every 0.5 s)
    before = _speculative_counters(client)
    cmd = [str(vllm), "bench", "serve", "--backend", "openai", "--base-url", server,
           "--endpoint", "/v1/completions", "--model", serve_config.model.served_model_name,
           "--tokenizer", resolve_path(serve_config.model.path), "--dataset-name", "random",
           "--random-input-len", "24", "--random-output-len", "48", "--ignore-eos",
           "--num-prompts", str(NUM_PROMPTS), "--max-concurrency", "4", "--temperature", "0",
           "--seed", "0", "--extra-body", json.dumps({"route": "speculative"}),
           "--disable-tqdm", "--save-result", "--result-dir", str(tmp_path),
           "--result-filename", "bench.json"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "Acceptance rate (%):" in run.stdout, run.stdout[-4000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == NUM_PROMPTS
    time.sleep(2)
    after = _speculative_counters(client)
    drafted = after["num_draft_tokens"] - before["num_draft_tokens"]
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    assert result["spec_decode_draft_tokens"] > 0 and drafted > 0
    # vLLM's client read /metrics as its last response came back, the pools' last pushes (every
    # 0.5 s) possibly not yet in: it may lag the settled counters, never lead them (seen on a
    # loaded machine: 376 of 1,056 draft tokens), so its acceptance rate, a ratio over the same
    # window, is what must agree.
    assert 0 < result["spec_decode_draft_tokens"] <= drafted
    assert result["spec_decode_accepted_tokens"] <= accepted
    assert abs(result["spec_decode_acceptance_rate"] - 100 * accepted / drafted) < 10
    # its mean acceptance length is 1 + accepted / drafts (vLLM's definition, DESIGN.md §2)
    assert result["spec_decode_acceptance_length"] == pytest.approx(
        1 + result["spec_decode_accepted_tokens"] / result["spec_decode_num_drafts"])


def test_a_benchmark_cell_sends_both_endpoints_through_vllms_client(server, serve_config):
    """`bench.run`'s cells (bench/serve_client.py): vLLM's load generator sends the mixed
    workload's completions and chats in one run, the forced route rides in each body, and the
    cell's route mix (from `/metrics`), settled acceptance and CPU shares are filled in."""
    import asyncio
    import itertools

    from vllm.tokenizers import get_tokenizer

    from bench.serve_client import Load, run_cell, sample_requests
    from bench.summary import Slo
    from bench.workload import jobs

    model = serve_config.model.served_model_name
    tokenizer = get_tokenizer(resolve_path(serve_config.model.path))
    batch = list(itertools.islice(jobs("mixed", model, 5, "speculative"), 12))
    assert {j.path for j in batch} == {"/v1/completions", "/v1/chat/completions"}
    got = asyncio.run(run_cell(server, model, sample_requests(batch, tokenizer),
                               Load(concurrency=4), Slo(60.0, 60.0), tokenizer,
                               [j.task for j in batch]))
    assert (got["requests"], got["errors"]) == (12, 0), got["first_error"]
    assert got["route_mix"] == {"speculative": 12}
    assert sum(sum(mix.values()) for mix in got["route_mix_by_task"].values()) == 12
    assert set(got["route_mix_by_task"]) == {j.task for j in batch}
    assert got["output_tok_s"] > 0 and got["tpot_p50_ms"] > 0 and got["ttft_p99_ms"] > 0
    assert got["slo_attainment"] == 1.0
    k = serve_config.speculative.speculator.num_speculative_tokens
    assert got["acceptance"]["num_drafts"] > 0
    assert 1.0 <= got["acceptance"]["mean_acceptance_length"] <= 1 + k
    assert got["cpu"]["engines"] > 0 and got["cpu"]["machine"] > 0
