"""The first streamed chunk at once, the rest batched: a pool replica's output stream.

Ray Serve LLM's `LLMServer` (ray 2.60) hands a streamed response on in batches: its `Batcher`
waits `stream_batching_interval_ms` (default 50 ms, `RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS`)
before it yields what the engine produced, the first batch included, so every streamed request's
first token leaves the replica no sooner than 50 ms after the request reached it, however early
vLLM made it. Measured against `make serve` (2 cores, tiny target) with vLLM's client, one
request at a time: median TTFT 75-78 ms with Ray Serve LLM's batching, 32-39 ms with this, output
tok/s unchanged (bench/results/2026-12-05-first-chunk/); a 1-token non-streamed request took
33-35 ms end to end. Batching later chunks is what keeps the serving frontend's CPU per token low (one
Serve streaming hop per batch, not per token); delaying the first one buys nothing, since a batch
of one chunk costs the same whenever it leaves. `first_then_batched` yields the first chunk as
soon as the engine makes it and batches the rest as Ray Serve LLM does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

from core.ray_private import Batcher

T = TypeVar("T")


async def first_then_batched(generator: AsyncIterator[T], interval_ms: float | None
                             ) -> AsyncGenerator[list[T], None]:
    """`generator`'s items as lists: the first item alone, as soon as it comes, then what came
    in each `interval_ms` (Ray Serve LLM's `Batcher`: 0 yields every item alone, None all the
    rest in one list at the end).

    Closing this generator (the client went away) closes `generator` too, wherever it is: the
    engine's stream aborts its request, as with Ray Serve LLM's own batching. An exception of
    `generator` propagates.
    """
    try:
        first = await anext(generator)
    except StopAsyncIteration:
        return
    try:
        yield [first]
    except BaseException:  # closed or thrown into before the rest began: close the source
        await generator.aclose()
        raise
    rest = Batcher(generator, interval_ms=interval_ms).stream()
    try:
        async for batch in rest:
            yield batch
    finally:
        await rest.aclose()  # Batcher cancels its reader, which closes `generator`
