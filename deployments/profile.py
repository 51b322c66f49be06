"""Step-time profile of a pool replica's engine, measured at replica start.

For each batch size B (powers of two), B greedy requests run together twice: once for their
first token only (prefill), once for `1 + decode_tokens` tokens. Seconds per decode step =
Δwall / Δengine iterations between the two runs (vLLM's `vllm:iteration_tokens_total` count), so
the prefill, which both runs pay alike, drops out. On the vanilla pool that is T_t(B, 1); on the
speculative pool γ·T_d(B) + T_t(B, γ+1): what a running request lives per step, the quantity the
router's served samples (mean inter-token latency, core/step_time.py) measure.

Why the difference: a 16-token profile that counted its prefill measured 1459 ms per step at
batch 64 on the weight-bound target's speculative pool, where its prefill alone took 4.9 s of the
8.8 s and decode steps took 337 ms (bench/results/2026-12-04-wide/profile-vs-decode.log), and the
router's S(B) then said code pays to batch 128.

Each request's prompt starts with its own tag, so that no run reads another's prefill from
vLLM's prefix cache; the rest repeats itself so that n-gram speculators propose full drafts, as in
real code traffic.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Awaitable, Callable

PROFILE_PROMPT = "for i in range(10):\n    print(i)\n" * 4
# Decode tokens per profiled request after its first: 32 gives a speculative engine at mean
# acceptance length 4 eight steps to measure.
DECODE_TOKENS = 32


def profile_batches(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to `max_batch` (empty when 0)."""
    out, b = [], 1
    while b <= max_batch:
        out.append(b)
        b *= 2
    return out


def profile_prompt(tag: int) -> str:
    """PROFILE_PROMPT behind a line of its own (`tag`: unique per request, so that prompts share
    no prefix-cache block)."""
    return f"# {tag}\n{PROFILE_PROMPT}"


async def profile_step_times(run_one: Callable[[str, int], Awaitable[None]],
                             iterations: Callable[[], int],
                             batches: list[int],
                             decode_tokens: int = DECODE_TOKENS) -> dict[int, float]:
    """{B: seconds per decode step} for each B in `batches`, after one unmeasured warm-up
    request: an engine's first requests pay one-off costs (vLLM's n-gram proposer is numba code;
    which first-use cost it was is not measured). Without it the default config's speculative
    pool measured 160 ms per step at batch 1 against 15 ms at batch 2, and the router sent the
    README's code request vanilla at S = 0.18; with it, 9 ms and S = 5.2 (measured on 2 cores).

    A batch whose decode run took no more steps or time than its prefill run (a clock or counter
    hiccup) is left out; the router then uses the neighbouring buckets.

    Args:
        run_one: runs one greedy request (prompt, max_tokens) to completion on the engine,
            ignoring EOS.
        iterations: the engine's step counter now.
        batches: batch sizes to measure.
        decode_tokens: output tokens after the first in the decode run (≥ 1).

    Raises:
        ValueError: decode_tokens < 1.
    """
    if decode_tokens < 1:
        raise ValueError(f"decode_tokens must be at least 1, got {decode_tokens}")
    tags = itertools.count()
    out: dict[int, float] = {}
    if batches:
        await run_one(profile_prompt(next(tags)), 1 + decode_tokens)

    async def timed(b: int, max_tokens: int) -> tuple[float, int]:
        before, t0 = iterations(), time.perf_counter()
        await asyncio.gather(*(run_one(profile_prompt(next(tags)), max_tokens)
                               for _ in range(b)))
        wall = time.perf_counter() - t0
        await asyncio.sleep(0.05)  # the stats logger records the last step after its output
        return wall, iterations() - before

    for b in batches:
        prefill_s, prefill_steps = await timed(b, 1)
        wall, steps = await timed(b, 1 + decode_tokens)
        if steps > prefill_steps and wall > prefill_s:
            out[b] = (wall - prefill_s) / (steps - prefill_steps)
    return out
