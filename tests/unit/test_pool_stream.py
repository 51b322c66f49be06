"""deployments/streaming.py: a pool replica's streamed response leaves with its first chunk at
once and the rest in Ray Serve LLM's batches, and closing it aborts the engine's stream wherever
it is."""

from __future__ import annotations

import asyncio
import time

import pytest

from deployments.streaming import first_then_batched


class _Engine:
    """An engine stream: `n` chunks, `gap_s` apart; records whether its `finally:` ran (where
    vLLM aborts the request)."""

    def __init__(self, n: int, gap_s: float, fail_at: int | None = None):
        self.n, self.gap_s, self.fail_at, self.closed = n, gap_s, fail_at, False

    async def gen(self):
        try:
            for i in range(self.n):
                await asyncio.sleep(self.gap_s)
                if i == self.fail_at:
                    raise RuntimeError("engine died")
                yield i
        finally:
            self.closed = True


async def _collect(stream):
    t0, out = time.monotonic(), []
    async for batch in stream:
        out.append((time.monotonic() - t0, batch))
    return out


def test_the_first_chunk_leaves_at_once_and_the_rest_in_batches():
    """With a 10 s interval: the first chunk comes while the engine is still generating (Ray's
    Batcher alone would hold it 10 s), the rest in one batch once the engine is done."""
    async def run():
        release = asyncio.Event()

        async def engine():
            yield 0
            await release.wait()
            for i in range(1, 10):
                yield i
        stream = first_then_batched(engine(), interval_ms=10_000)
        first = await asyncio.wait_for(anext(stream), timeout=5)
        release.set()
        return first, [b async for b in stream]
    first, rest = asyncio.run(run())
    assert first == [0] and rest == [list(range(1, 10))]


def test_stock_batching_holds_the_first_chunk_for_the_interval():
    """What the override fixes, on the same engine: Ray Serve LLM's Batcher yields nothing
    before its first interval is over (here: not before the engine finished, 10 s)."""
    from core.ray_private import Batcher

    async def stock():
        return await _collect(Batcher(_Engine(10, 0.001).gen(), interval_ms=10_000).stream())
    assert [b for _, b in asyncio.run(stock())] == [list(range(10))]


def test_later_chunks_come_once_per_interval():
    out = asyncio.run(_collect(first_then_batched(_Engine(20, 0).gen(), interval_ms=30)))
    assert out[0][1] == [0] and [i for _, b in out for i in b] == list(range(20))
    assert len(out) < 20 and max(len(b) for _, b in out) >= 2  # batched, not one per chunk


@pytest.mark.parametrize("interval_ms", [0, None])
def test_interval_zero_is_per_chunk_and_none_is_one_batch(interval_ms):
    out = asyncio.run(_collect(first_then_batched(_Engine(5, 0.001).gen(), interval_ms)))
    assert [b for _, b in out] == ([[0], [1], [2], [3], [4]] if interval_ms == 0
                                   else [[0], [1, 2, 3, 4]])


def test_an_empty_stream_yields_nothing():
    assert asyncio.run(_collect(first_then_batched(_Engine(0, 0).gen(), 50))) == []


def test_an_engine_error_propagates_and_the_engine_stream_is_closed():
    engine = _Engine(5, 0.001, fail_at=2)
    with pytest.raises(RuntimeError, match="engine died"):
        asyncio.run(_collect(first_then_batched(engine.gen(), 50)))
    assert engine.closed


@pytest.mark.parametrize("after_batches", [1, 2])
def test_closing_the_stream_aborts_the_engine_stream(after_batches):
    """The client went away after the first chunk (before batching began) or mid-batching."""
    async def run():
        engine = _Engine(100, 0.005)
        stream = first_then_batched(engine.gen(), 20)
        for _ in range(after_batches):
            await anext(stream)
        await stream.aclose()
        await asyncio.sleep(0.05)  # Batcher's reader is cancelled, not awaited
        return engine.closed
    assert asyncio.run(run())


def test_cancelled_while_waiting_for_the_first_chunk_aborts_the_engine_stream():
    async def run():
        engine = _Engine(3, 10.0)
        task = asyncio.ensure_future(_collect(first_then_batched(engine.gen(), 50)))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return engine.closed
    assert asyncio.run(run())
