"""One benchmark cell through vLLM's own load generator and metrics.

Load comes from `vllm.benchmarks.serve.benchmark`, the function `vllm bench serve` runs: its
request functions stream every request and time it, its arrival process sends the requests
(`max_concurrency` slots with every request queued at once for a closed loop; exponential gaps
for a Poisson rate, seeded through numpy's global RNG as `vllm bench serve --seed` does), and its
`calculate_metrics` gives throughput, TTFT / TPOT / ITL percentiles and goodput (DistServe's: a
request is good when TTFT and TPOT are within the SLO). Acceptance comes from the
`vllm:spec_decode_*` series of the server's `/metrics` before and after the run, read with vLLM's
own parser (`fetch_spec_decode_metrics`) but `SETTLE_S` after the last answer: the replicas push
their engine counters every `core.stats.PUSH_PERIOD_S` and the ingress reads them as often, so
vLLM's own reading, taken at once, misses the last pushes (and the next cell would count them).

What vLLM's client lacks, and specserve adds here:
- **both OpenAI endpoints in one run**: `benchmark` takes one endpoint type; the mixed workload
  sends code completions to `/v1/completions` and chat prompts to `/v1/chat/completions`, so the
  request function (`openai_request`) picks vLLM's completions or chat function per request;
- **the route**: each request's `route` and `temperature` ride in `SampleRequest.request_overrides`
  (vLLM merges them into the body);
- **the route mix**: `specserve_requests_total{route, task}` read from `/metrics` before and after;
- **where the CPU went**: cores kept busy per part of the stack (bench/machine.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import math
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import aiohttp
import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from vllm.benchmarks.datasets import SampleRequest
from vllm.benchmarks.lib.endpoint_request_func import (ASYNC_REQUEST_FUNCS, RequestFuncInput,
                                                       RequestFuncOutput,
                                                       async_request_openai_chat_completions,
                                                       async_request_openai_completions)
from vllm.benchmarks.serve import (TaskType, benchmark, calculate_metrics,
                                   fetch_spec_decode_metrics)

from bench.machine import busy_cores, cpu_seconds
from bench.summary import Slo, percentile
from bench.workload import Job

ENDPOINT_TYPE = "specserve-openai"
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
PERCENTILES = [50.0, 99.0]
SETTLE_S = 2.0  # > 2 x core.stats.PUSH_PERIOD_S (replica -> board, board -> ingress) + margin


async def openai_request(request_func_input: RequestFuncInput, session, pbar=None
                         ) -> RequestFuncOutput:
    """vLLM's OpenAI request function for this request: chat completions when it carries
    `chat_messages` (its `api_url`, which names `/v1/completions`, is pointed at
    `/v1/chat/completions`), completions otherwise."""
    if request_func_input.chat_messages is not None:
        url = request_func_input.api_url.removesuffix(COMPLETIONS) + CHAT
        return await async_request_openai_chat_completions(
            dataclasses.replace(request_func_input, api_url=url), session, pbar)
    return await async_request_openai_completions(request_func_input, session, pbar)


ASYNC_REQUEST_FUNCS.setdefault(ENDPOINT_TYPE, openai_request)


def sample_requests(jobs: Iterable[Job], tokenizer=None) -> list[SampleRequest]:
    """vLLM `SampleRequest`s for `jobs` (bench/workload.py): the prompt or chat messages, the
    prompt's length in the target's tokens (0 without a tokenizer; the server's count replaces
    it in the figures),
    `max_tokens` as the expected output length, and `temperature` and `route` as per-request
    overrides of the body."""
    out = []
    for job in jobs:
        body = job.body
        messages = body.get("messages")
        text = body["prompt"] if messages is None else " ".join(m["content"] for m in messages)
        out.append(SampleRequest(
            prompt=text, prompt_len=len(tokenizer(text).input_ids) if tokenizer else 0,
            expected_output_len=body["max_tokens"], chat_messages=messages,
            request_overrides={"temperature": body["temperature"], "route": body["route"]}))
    return out


@dataclass(frozen=True, slots=True)
class Load:
    """How a cell sends its requests: a closed loop of `concurrency` slots (`rate_req_s` inf), or
    Poisson arrivals at `rate_req_s` (requests/s) with no client-side cap (`concurrency` None)."""

    concurrency: int | None = None
    rate_req_s: float = math.inf
    seed: int = 0


async def route_counts(client: httpx.AsyncClient) -> Counter:
    """`specserve_requests_total` from the server's `/metrics`, summed by (route, task, reason)."""
    r = await client.get("/metrics")
    r.raise_for_status()
    out: Counter = Counter()
    for family in text_string_to_metric_families(r.text):
        if family.name == "specserve_requests":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[s.labels["route"], s.labels["task"], s.labels["reason"]] += s.value
    return out


async def reset_prefix_caches(client: httpx.AsyncClient, tries: int = 10) -> dict:
    """Drops every engine's KV prefix cache (`POST /admin/reset_prefix_cache`, router/admin.py)
    before a cell: the systems of a cell send the same prompts one after the other to the same
    engines, and without this the second would find the first's prompts cached (measured
    2026-12-06 on the weight-bound target: forced-vanilla's TTFT p50 1.9 s after routed's 6.6 s
    on the same long prompts, 5.4 s for vanilla-x2 on a fresh app). A 409 (a replica still
    finishing a request) is retried once a second, `tries` times.

    Returns:
        The endpoint's answer, `{"pools": {pool: {"replicas", "reset"}}}`.

    Raises:
        RuntimeError: any other answer, or still 409 after `tries`.
    """
    for _ in range(tries):
        r = await client.post("/admin/reset_prefix_cache")
        if r.status_code != 409:
            break
        await asyncio.sleep(1.0)
    if r.status_code != 200:
        raise RuntimeError(f"POST /admin/reset_prefix_cache: {r.status_code} {r.text}")
    return r.json()


@dataclass
class Block:
    """One call of vLLM's client within a cell, with what specserve reads around it.

    Attributes:
        result: `vllm.benchmarks.serve.benchmark`'s return value (per-request lists included).
        requests: the `SampleRequest`s it sent, in order.
        tasks: each request's task type (None: not split by task).
        routes: `specserve_requests_total` increments during the block, by (route, task, reason).
        cpu: CPU seconds per part of the stack spent during the block (`bench.machine`).
        wall_s: wall seconds from before the first request to after the last answer.
        spec: the `fetch_spec_decode_metrics` readings (before, after); None entries where no
            pool drafts.
    """

    result: dict
    requests: list[SampleRequest]
    tasks: list[str] | None
    routes: Counter
    cpu: dict[str, float]
    wall_s: float
    spec: tuple


def goodput_config(slo: Slo | None) -> dict[str, float]:
    """vLLM's `goodput_config_dict` for `slo`: {"ttft": ms, "tpot": ms}; {} without an SLO."""
    return {} if slo is None else {"ttft": 1000 * slo.ttft_s, "tpot": 1000 * slo.tpot_s}


async def run_block(url: str, model: str, requests: list[SampleRequest], load: Load, slo: Slo,
                    tokenizer, tasks: list[str] | None = None) -> Block:
    """Sends `requests` to the application at `url` with vLLM's client and reads the route
    counters, the CPU and the acceptance counters around it. Every engine's prefix cache is
    dropped first (`reset_prefix_caches`)."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client, \
            aiohttp.ClientSession() as session:
        await reset_prefix_caches(client)
        routes0, spec0 = await route_counts(client), await fetch_spec_decode_metrics(url, session)
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        r = await _benchmark(url, model, requests, load, slo, tokenizer)
        cpu1, wall = cpu_seconds(), time.perf_counter() - t0
        routes = await route_counts(client) - routes0
        await asyncio.sleep(SETTLE_S)
        spec1 = await fetch_spec_decode_metrics(url, session)
    cpu = {kind: cpu1[kind] - cpu0.get(kind, 0.0) for kind in cpu1}
    return Block(r, list(requests), tasks, routes, cpu, wall, (spec0, spec1))


def figures(blocks: list[Block], slo: Slo, tokenizer) -> dict:
    """A cell's figures (`summary`) from one or more blocks of it, as if one run: one block's
    figures are vLLM's own; several blocks' requests are pooled and vLLM's `calculate_metrics`
    recomputes throughput (their output tokens over the sum of their durations), percentiles
    and goodput over all of them; route counts and acceptance counts are summed, CPU seconds
    divided by the blocks' total wall time.

    Raises:
        ValueError: `blocks` is empty.
    """
    if not blocks:
        raise ValueError("figures: no blocks")
    r = blocks[0].result if len(blocks) == 1 else merged_result(blocks, slo, tokenizer)
    tasks = None if any(b.tasks is None for b in blocks) else [t for b in blocks for t in b.tasks]
    cpu_s: Counter = Counter()
    for b in blocks:
        cpu_s.update(b.cpu)
    cpu = busy_cores({}, dict(cpu_s), sum(b.wall_s for b in blocks))
    return summary(r, sum((b.routes for b in blocks), Counter()), cpu, tasks,
                   acceptance_sum([b.spec for b in blocks]))


def merged_result(blocks: list[Block], slo: Slo | None, tokenizer) -> dict:
    """The keys of `benchmark`'s result that `summary` reads, over every block's requests:
    vLLM's `calculate_metrics` on their outputs (rebuilt from each result's per-request lists)
    with the blocks' durations summed (the gaps between blocks are not load time)."""
    outputs, requests = [], []
    for b in blocks:
        r = b.result
        for i, err in enumerate(r["errors"]):
            outputs.append(RequestFuncOutput(
                generated_text=r["generated_texts"][i], success=not err and r["output_lens"][i] > 0,
                latency=r["latencies"][i], output_tokens=r["output_lens"][i], ttft=r["ttfts"][i],
                itl=list(r["itls"][i]), prompt_len=r["input_lens"][i], error=err,
                start_time=r["start_times"][i]))
        requests += b.requests
    goodput = goodput_config(slo)
    duration = sum(b.result["duration"] for b in blocks)
    with contextlib.redirect_stdout(io.StringIO()):
        m, lens = calculate_metrics(requests, outputs, duration, tokenizer, PERCENTILES, goodput)
    out = {"duration": duration, "failed": m.failed, "output_throughput": m.output_throughput,
           "request_goodput": m.request_goodput if goodput else None, "output_lens": lens,
           "errors": [o.error for o in outputs], "latencies": [o.latency for o in outputs],
           "ttfts": [o.ttft for o in outputs], "itls": [list(o.itl) for o in outputs]}
    for metric in ("ttft", "tpot", "itl"):
        for q, value in getattr(m, f"percentiles_{metric}_ms"):
            out[f"p{int(q) if int(q) == q else q}_{metric}_ms"] = value
    return out


async def run_cell(url: str, model: str, requests: list[SampleRequest], load: Load, slo: Slo,
                   tokenizer, tasks: list[str] | None = None) -> dict:
    """Sends `requests` to the application at `url` with vLLM's client; returns the cell's figures.

    Args:
        tasks: each request's task type, for TPOT per task (None: not split).

    Returns:
        requests, errors, wall_s, output_tok_s, goodput_req_s, slo_attainment, ttft / tpot / itl
        p50 and p99 (ms), tpot_p50_ms_by_task, the chunk figures (`chunk_figures`: itl_mean_ms,
        itl_mean_ms_by_task, tokens_per_chunk_by_task), route_mix {route: n}, route_mix_by_task
        {task: {route: n}}, route_reasons {"route/reason": n} (the router's reasons: the
        `reason` label of `specserve_requests_total`, the values `x-specserve-reason` carries),
        acceptance (`acceptance`: acceptance_rate in %, mean_acceptance_length, num_drafts;
        None when no pool drafted), cpu (cores busy per part of the stack and the machine,
        `bench.machine.busy_cores`), load_avg_1m at the end, first_error. Every engine's
        prefix cache is dropped first (`reset_prefix_caches`).
    """
    return figures([await run_block(url, model, requests, load, slo, tokenizer, tasks)], slo,
                   tokenizer)


def acceptance(before, after) -> dict | None:
    """Acceptance between two `fetch_spec_decode_metrics` readings, as `vllm bench serve` prints
    it: acceptance rate (%) = accepted / draft tokens, mean acceptance length = 1 + accepted /
    drafts; None when no pool drafted in between."""
    return acceptance_sum([(before, after)])


def acceptance_sum(readings: list[tuple]) -> dict | None:
    """`acceptance` over several (before, after) pairs of readings, their increments summed."""
    drafts = tokens = accepted = 0
    for before, after in readings:
        if before is None or after is None or after.num_drafts <= before.num_drafts:
            continue
        drafts += after.num_drafts - before.num_drafts
        tokens += after.num_draft_tokens - before.num_draft_tokens
        accepted += after.num_accepted_tokens - before.num_accepted_tokens
    if not drafts:
        return None
    return {"acceptance_rate": round(100 * accepted / max(tokens, 1), 2),
            "mean_acceptance_length": round(1 + accepted / drafts, 3), "num_drafts": drafts}


async def warm_up(url: str, model: str, jobs: list[Job], concurrency: int) -> None:
    """Sends `jobs` through vLLM's client `concurrency` at a time (engines compile their shapes,
    the router learns acceptance and step times); figures discarded.

    Raises:
        RuntimeError: a request failed (its error).
    """
    r = await _benchmark(url, model, sample_requests(jobs), Load(concurrency=concurrency))
    await asyncio.sleep(SETTLE_S)  # the next cell's counters start after these requests' pushes
    if r["failed"]:
        raise RuntimeError(f"warm-up: {r['failed']} of {len(jobs)} requests failed: "
                           f"{next(e for e in r['errors'] if e)[-300:]}")


async def _benchmark(url: str, model: str, requests: list[SampleRequest], load: Load,
                     slo: Slo | None = None, tokenizer=None) -> dict:
    """`vllm.benchmarks.serve.benchmark` on `requests` (its printed table kept off stdout);
    without a tokenizer vLLM computes no TTFT / TPOT / ITL percentiles."""
    np.random.seed(load.seed)
    goodput = goodput_config(slo)
    with contextlib.redirect_stdout(io.StringIO()):
        return await benchmark(
            task_type=TaskType.GENERATION, endpoint_type=ENDPOINT_TYPE,
            api_url=url + COMPLETIONS, base_url=url, model_id=model, model_name=model,
            tokenizer=tokenizer, input_requests=requests, logprobs=None,
            request_rate=load.rate_req_s, burstiness=1.0, disable_tqdm=True, num_warmups=0,
            profile=False, selected_percentile_metrics=["ttft", "tpot", "itl", "e2el"],
            selected_percentiles=PERCENTILES, ignore_eos=True, goodput_config_dict=goodput,
            max_concurrency=load.concurrency, lora_modules=None, extra_headers=None,
            extra_body=None, ready_check_timeout_sec=0)


def chunk_figures(r: dict, ok: list[int], tasks: list[str] | None) -> dict:
    """What the streamed chunks of the requests `ok` (indices into vLLM's result `r`) lived: an
    engine step emits one chunk per running request (every token it accepted), and vLLM's client
    keeps one inter-token latency per chunk after the first, so the mean of those latencies is the
    seconds per engine step as a request lived it (what the router's step-time samples measure,
    core/stats.py `busy_window_samples`), and output tokens after the first over chunks after the
    first is the mean acceptance length a task lived (1.0 without speculation).

    Returns:
        itl_mean_ms (over every chunk; None without chunks), itl_mean_ms_by_task and
        tokens_per_chunk_by_task ({task: value}; empty without `tasks` or `r["itls"]`).
    """
    itls = r.get("itls") or []
    total, count = 0.0, 0
    by_task: dict[str, list[float]] = {}  # task: [sum of ITLs, chunks, tokens after the first]
    for i in ok:
        lived = itls[i] if i < len(itls) else []
        if not lived:
            continue
        total, count = total + sum(lived), count + len(lived)
        if tasks:
            acc = by_task.setdefault(tasks[i], [0.0, 0, 0])
            acc[0] += sum(lived)
            acc[1] += len(lived)
            acc[2] += r["output_lens"][i] - 1
    return {"itl_mean_ms": round(1000 * total / count, 2) if count else None,
            "itl_mean_ms_by_task": {t: round(1000 * a[0] / a[1], 2) for t, a in by_task.items()},
            "tokens_per_chunk_by_task": {t: round(a[2] / a[1], 3) for t, a in by_task.items()}}


def summary(r: dict, routes: Counter, cpu: dict, tasks: list[str] | None,
            spec: dict | None) -> dict:
    """The cell's figures from vLLM's result dict `r` (`benchmark`'s return value), the route
    counts it caused, the cores it kept busy and its settled acceptance `spec` (see
    `run_cell`)."""
    n = len(r["errors"])
    ok = [i for i, e in enumerate(r["errors"]) if not e and r["output_lens"][i]]
    tpot: dict[str, list[float]] = {}
    for i in ok:
        if tasks and r["output_lens"][i] > 1:
            tpot.setdefault(tasks[i], []).append(
                (r["latencies"][i] - r["ttfts"][i]) / (r["output_lens"][i] - 1))
    by_task: dict[str, dict[str, int]] = {}
    mix: Counter = Counter()
    reasons: Counter = Counter()
    for (route, task, reason), count in sorted(routes.items()):
        if count:
            by_task.setdefault(task, {})
            by_task[task][route] = by_task[task].get(route, 0) + int(count)
            mix[route] += int(count)
            reasons[f"{route}/{reason}"] += int(count)
    good = (r["request_goodput"] or 0.0) * r["duration"]
    return {
        "requests": n, "errors": r["failed"], "wall_s": round(r["duration"], 2),
        "output_tok_s": round(r["output_throughput"], 1),
        "goodput_req_s": round(r["request_goodput"] or 0.0, 3),
        "slo_attainment": round(good / max(n, 1), 3),
        **{f"{m}_p{int(q)}_ms": round(r[f"p{int(q)}_{m}_ms"], 2)
           for m in ("ttft", "tpot", "itl") for q in PERCENTILES},
        "tpot_p50_ms_by_task": {t: round(1000 * percentile(v, 50), 2) for t, v in tpot.items()},
        **chunk_figures(r, ok, tasks),
        "route_mix": dict(mix), "route_mix_by_task": by_task, "route_reasons": dict(reasons),
        "acceptance": spec,
        "cpu": cpu, "load_avg_1m": round(os.getloadavg()[0], 2),
        "first_error": next((e for e in r["errors"] if e), "")[-300:],
    }
