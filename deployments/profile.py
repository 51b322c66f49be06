"""Step-time profile of a pool replica's engine, measured at replica start.

For each batch size B (powers of two), B greedy requests of `1 + decode_tokens` tokens run
together, streamed. The measured window opens when the last of them has its first token (every
prefill done) and closes when the first of them finishes, so that B requests decode in every step
of it and no step prefills: seconds per decode step = the mean of vLLM's inter-token latencies of
the window's decode-only iterations (Δsum / Δcount of the replica's tally,
deployments/engine_metrics.py `PoolStatLogger`, read at both ends just after an output arrived,
so its lag behind the outputs cancels), the very estimator of the router's served samples
(`core.stats.busy_window_samples`); where the replica keeps no tally, Δwall / Δengine iterations
(vLLM's `vllm:iteration_tokens_total` count). On the vanilla pool that is T_t(B, 1); on the
speculative pool γ·T_d(B) + T_t(B, γ+1): what a running request lives per step.

Why the latencies and not the wall clock: a profile point and a served sample of the same batch
are then the same quantity, and vLLM stamps each output in the engine process
(`EngineCoreOutputs.timestamp`), while the wall clock runs in the replica's frontend, which sees
an output late by however long it waited for a core (at start, beside the other pool's profile).
On one fresh `make serve` (2-core AMD EPYC, 2026-12-07) the two agreed within 0.4 ms at every
batch up to 64 and read 73.4 / 77.2 ms at 128 (the replica logs both); the speculative pool's
batch-1 point, 7.5 ms, then gave way to served samples of 6.1-6.5 ms within twelve requests.

Why a window: the 16-token profile that counted every step of its requests measured 1459 ms per
step at batch 64 on the weight-bound target's speculative pool, where the prefill alone took 4.9 s
of the 8.8 s and decode steps took 337 ms (bench/results/2026-12-04-wide/profile-vs-decode.log),
and the router's S(B) said code pays to batch 128. Differencing a 1-token run out of a longer one
fixed the mean but not the noise: two prefills of seconds each, one of them beside the other
pool's profile, left 587 ms at batch 64 between 83 ms at 32 and 492 ms at 128 (vanilla pool,
served, float32, 2026-12-04).

Each request's prompt starts with its own tag, so that no request reads another's prefill from
vLLM's prefix cache (real traffic pays its prefill); the rest repeats itself so that n-gram
speculators propose full drafts, as in real code traffic.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from typing import Awaitable, Callable, Iterator

PROFILE_PROMPT = "for i in range(10):\n    print(i)\n" * 4
# Output tokens per profiled request after its first. Requests prefilled in different chunked
# steps start decoding up to a few steps apart, which the window loses; 48 leaves a speculative
# engine at mean acceptance length 4 about 12 steps, minus that stagger.
DECODE_TOKENS = 48


def profile_key(model_source: str, engine_kwargs: dict, max_batch: int, hardware: str) -> str:
    """What a replica's startup profile depends on, as one key (a SHA-256 hex digest): the
    checkpoint (`model_source`), every vLLM engine argument the replica runs with (`dtype` as
    served, `speculative_config` with its speculator and k, `max_num_seqs`, `max_model_len`,
    `tensor_parallel_size`, `enforce_eager`, the pool's fingerprint, which names vLLM's version),
    the profile's largest batch and the `hardware` it runs on (`PoolServer`: the CPU's model and
    the cores it owns, or the node's GPU type).

    Two replicas with the same key run the same engine on the same kind of accelerator, so the
    first one's profile stands for the next one's: a replica that finds its key on the
    StatsBoard adopts that profile instead of measuring again (`PoolServer`), and its own served
    samples correct it as for any profile point (`core.step_time.StepTimeModel`). Measured on the
    weight-bound target (2-core AMD EPYC, 2026-12-07, bench/results/2026-12-07-wide-budget-trace):
    a scaled-up vanilla replica spent 164 s of its 236 s start profiling (step times 100 s,
    context cost 64 s), longer than the burst that woke it.
    """
    material = {"model": model_source, "engine": engine_kwargs, "max_batch": max_batch,
                "hardware": hardware}
    text = json.dumps(material, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


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


RunOne = Callable[[str, int, Callable[[], None]], Awaitable[None]]
# (count, sum in seconds) of the engine's decode-only inter-token latencies so far
Latencies = Callable[[], tuple[int, float]]


async def profile_step_times(run_one: RunOne, iterations: Callable[[], int],
                             batches: list[int],
                             decode_tokens: int = DECODE_TOKENS,
                             latencies: Latencies | None = None,
                             wall: dict[int, float] | None = None) -> dict[int, float]:
    """{B: seconds per decode step} for each B in `batches`, after one unmeasured warm-up
    request: an engine's first requests pay one-off costs (vLLM's n-gram proposer is numba code;
    which first-use cost it was is not measured). Without it the default config's speculative
    pool measured 160 ms per step at batch 1 against 15 ms at batch 2, and the router sent the
    README's code request vanilla at S = 0.18; with it, 9 ms and S = 5.2 (measured on 2 cores).

    A batch whose window holds no engine step (a request finished before the last one started)
    is left out; the router then uses the neighbouring buckets.

    Args:
        run_one: runs one greedy request (prompt, max_tokens, on_first) to completion on the
            engine, streamed and ignoring EOS, calling `on_first()` once its first output
            arrives.
        iterations: the engine's step counter now.
        batches: batch sizes to measure.
        decode_tokens: output tokens after the first (≥ 1).
        latencies: the engine's decode-only inter-token latency tally now (count, seconds);
            None: time the windows by the wall clock (module docstring).
        wall: when given, also filled with each batch's Δwall / Δiterations (for the log:
            the two estimators side by side).

    Raises:
        ValueError: decode_tokens < 1.
    """
    if decode_tokens < 1:
        raise ValueError(f"decode_tokens must be at least 1, got {decode_tokens}")
    tags = itertools.count()
    out: dict[int, float] = {}
    if batches:
        await run_one(profile_prompt(next(tags)), 1 + decode_tokens, lambda: None)
    for b in batches:
        step_s, wall_s = await _decode_window(run_one, iterations, b, 1 + decode_tokens, tags,
                                              latencies)
        if step_s is not None:
            out[b] = step_s
        if wall is not None and wall_s is not None:
            wall[b] = wall_s
    return out


async def _decode_window(run_one: RunOne, iterations: Callable[[], int], batch: int,
                         max_tokens: int, tags: Iterator[int], latencies: Latencies | None = None
                         ) -> tuple[float | None, float | None]:
    """(seconds per step while all `batch` requests decode, Δwall / Δiterations over the same
    window); the first is the window's mean decode-only inter-token latency, or without
    `latencies` (or none in the window) the second. (None, None): no step had them all."""
    return await _decode_window_of(run_one, iterations, batch, max_tokens,
                                   lambda: profile_prompt(next(tags)), latencies)


async def _decode_window_of(run_one: RunOne, iterations: Callable[[], int], batch: int,
                            max_tokens: int, prompt: Callable[[], str],
                            latencies: Latencies | None = None
                            ) -> tuple[float | None, float | None]:
    """`_decode_window` on prompts from `prompt()`, one per request."""
    started = 0
    ends: dict[str, tuple[float, int, tuple[int, float]]] = {}
    tally = latencies or (lambda: (0, 0.0))

    def on_first() -> None:
        nonlocal started
        started += 1
        if started == batch:
            ends["open"] = (time.perf_counter(), iterations(), tally())

    async def one() -> None:
        await run_one(prompt(), max_tokens, on_first)
        ends.setdefault("close", (time.perf_counter(), iterations(), tally()))

    await asyncio.gather(*(one() for _ in range(batch)))
    if "open" not in ends:
        return None, None
    (t0, it0, (n0, s0)), (t1, it1, (n1, s1)) = ends["open"], ends["close"]
    if not (it1 > it0 and t1 > t0):
        return None, None
    wall_s = (t1 - t0) / (it1 - it0)
    return ((s1 - s0) / (n1 - n0) if n1 > n0 and s1 > s0 else wall_s), wall_s


# The context-cost windows (`profile_context_cost`): their batch, and the longest prompt the long
# one uses (the cost is linear in the context, so a longer one adds only prefill time).
CONTEXT_BATCH = 8
LONG_CONTEXT_TOKENS = 4096


def long_prompt_tokens(max_model_len: int, num_speculative_tokens: int = 0,
                       decode_tokens: int = DECODE_TOKENS) -> int:
    """Prompt tokens of the long context window: what max_model_len leaves after the window's
    1 + `decode_tokens` outputs, the speculator's lookahead and 8 tokens of margin, at most
    `LONG_CONTEXT_TOKENS` (0 when nothing is left)."""
    return max(0, min(LONG_CONTEXT_TOKENS,
                      max_model_len - 1 - decode_tokens - num_speculative_tokens - 8))


def context_prompt(tag: int, tokens: int, count: Callable[[str], int]) -> str:
    """`profile_prompt(tag)` grown line by line of PROFILE_PROMPT's code until it is as long as
    it can be within `tokens` tokens by `count` (never shorter than `profile_prompt(tag)`)."""
    lines = PROFILE_PROMPT.splitlines(keepends=True)
    prompt = profile_prompt(tag)
    body = prompt.splitlines(keepends=True)
    n = len(body)
    lo, hi = 0, 1
    while count("".join(body + lines * hi)) <= tokens:  # double, then bisect, whole repeats
        lo, hi = hi, hi * 2
        if hi > 1 << 20:
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count("".join(body + lines * mid)) <= tokens else (lo, mid)
    body += lines * lo
    for line in lines:  # then line by line
        if count("".join(body + [line])) > tokens:
            break
        body.append(line)
    return "".join(body) if len(body) > n else prompt


async def profile_context_cost(run_one: RunOne, iterations: Callable[[], int], batch: int,
                               count: Callable[[str], int], long_tokens: int,
                               decode_tokens: int = DECODE_TOKENS, repeats: int = 2,
                               latencies: Latencies | None = None
                               ) -> tuple[float, float] | None:
    """(κ, L_ref): the context cost of a decode step, from decode windows (`_decode_window`) at
    the same `batch`, on the profile's short prompts and on prompts of about `long_tokens`
    tokens, short and long alternating `repeats` times, each side's fastest kept (on a shared
    host a window is slowed, never sped up, by what else runs: one pair on the weight-bound
    target's speculative pool measured κ at 0, its vanilla pool 1.7 µs, 2026-12-05):
    κ = (T_long − T_short) / (batch · ΔL) seconds per step per running
    sequence per context token (ΔL: the prompts' difference in tokens by `count`, the target's
    tokenizer; clipped at 0, a step never gets cheaper with more context), and L_ref, the short
    window's mean context (prompt + 1 + decode_tokens / 2 tokens). The model it feeds is
    T(B, L) = T(B, L_ref) + κ·B·(L − L_ref) (core/step_time.py, after MagicDec,
    arXiv:2408.11049).

    Args:
        run_one, iterations, latencies: as `profile_step_times`.
        batch: sequences decoding together in each window (≥ 1).
        count: tokens of a prompt in the target's tokenizer.
        long_tokens: the long prompts' length in tokens (`long_prompt_tokens`).

    Returns:
        None when either window held no step with every request decoding, or the long prompt is
        not longer than the short one.
    """
    tags = itertools.count(1 << 20)  # prompts no other profile request shares a prefix with
    short = profile_prompt(0)
    long = context_prompt(0, long_tokens, count)
    delta = count(long) - count(short)
    if batch < 1 or delta <= 0:
        return None
    long_tags = itertools.count(1 << 21)
    shorts, longs = [], []
    for _ in range(max(1, repeats)):
        shorts.append((await _decode_window(run_one, iterations, batch, 1 + decode_tokens, tags,
                                            latencies))[0])
        longs.append((await _decode_window_of(
            run_one, iterations, batch, 1 + decode_tokens,
            lambda: context_prompt(next(long_tags), long_tokens, count), latencies))[0])
    shorts, longs = [t for t in shorts if t is not None], [t for t in longs if t is not None]
    if not shorts or not longs:
        return None
    t_short, t_long = min(shorts), min(longs)
    ref = count(short) + 1 + decode_tokens / 2
    return max(0.0, (t_long - t_short) / (batch * delta)), ref
