"""Step-time profile of a pool replica's engine, measured at replica start.

For each batch size B (powers of two), B identical greedy requests of `max_tokens` run together;
seconds per engine step = wall time / engine iterations (vLLM's `vllm:iteration_tokens_total`
count). On the vanilla pool that is T_t(B, 1); on the speculative pool γ·T_d(B) + T_t(B, γ+1).
The prompt repeats itself so that n-gram speculators propose full drafts, as in real code traffic.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

PROFILE_PROMPT = "for i in range(10):\n    print(i)\n" * 4


def profile_batches(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to `max_batch` (empty when 0)."""
    out, b = [], 1
    while b <= max_batch:
        out.append(b)
        b *= 2
    return out


async def profile_step_times(run_one: Callable[[], Awaitable[None]],
                             iterations: Callable[[], int],
                             batches: list[int]) -> dict[int, float]:
    """{B: seconds per engine step} for each B in `batches`, after one unmeasured warm-up
    request: an engine's first requests pay one-off costs (vLLM's n-gram proposer is numba code;
    which first-use cost it was is not measured). Without it the default config's speculative
    pool measured 160 ms per step at batch 1 against 15 ms at batch 2, and the router sent the
    README's code request vanilla at S = 0.18; with it, 9 ms and S = 5.2 (measured on 2 cores).

    Args:
        run_one: runs one profiling request to completion on the engine.
        iterations: the engine's step counter now.
        batches: batch sizes to measure.
    """
    out: dict[int, float] = {}
    if batches:
        await run_one()
    for b in batches:
        before, t0 = iterations(), time.perf_counter()
        await asyncio.gather(*(run_one() for _ in range(b)))
        wall = time.perf_counter() - t0
        await asyncio.sleep(0.05)  # the stats logger records the last step after its output
        steps = iterations() - before
        if steps > 0:
            out[b] = wall / steps
    return out
