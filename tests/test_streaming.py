"""RelayedStream (router/streaming.py) under each way a stream can end, on Starlette's real
StreamingResponse machinery (ASGI send/receive driven directly)."""

from __future__ import annotations

import asyncio

import pytest

from router.streaming import RelayedStream

SCOPE = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "method": "GET",
         "path": "/", "headers": []}


class _Body:
    """An SSE body generator that records whether its `finally:` ran."""

    def __init__(self, packets: int = 3):
        self.packets, self.finalized = packets, False

    async def gen(self):
        try:
            for i in range(self.packets):
                yield f"data: {i}\n\n"
                await asyncio.sleep(0)
        finally:
            self.finalized = True


async def _receive():
    await asyncio.sleep(3600)
    return {"type": "http.disconnect"}


def _stream(body: _Body, closes: list) -> RelayedStream:
    return RelayedStream(body.gen(), lambda: closes.append(1), media_type="text/event-stream")


def test_sent_in_full():
    body, closes, sent = _Body(), [], []

    async def send(message):
        sent.append(message)

    asyncio.run(_stream(body, closes)(SCOPE, _receive, send))
    assert sum(1 for m in sent if m.get("body")) == 3
    assert (body.finalized, closes) == (True, [1])


def test_client_gone_mid_stream():
    body, closes = _Body(), []

    async def send(message):
        if message.get("body"):
            raise OSError("connection reset")

    async def run():
        with pytest.raises(Exception):
            await _stream(body, closes)(SCOPE, _receive, send)
        return body.finalized  # before the loop's shutdown would finalize the generator

    assert (asyncio.run(run()), closes) == (True, [1])


def test_cancelled_while_waiting_to_send():
    body, closes = _Body(), []

    async def send(message):
        if message.get("body"):
            await asyncio.sleep(3600)  # a client that stopped reading

    async def run():
        task = asyncio.create_task(_stream(body, closes)(SCOPE, _receive, send))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return body.finalized  # before the loop's shutdown would finalize the generator

    assert (asyncio.run(run()), closes) == (True, [1])


def test_closed_before_the_body_started():
    body, closes = _Body(), []

    async def send(message):
        raise OSError("gone before the headers")

    with pytest.raises(Exception):
        asyncio.run(_stream(body, closes)(SCOPE, _receive, send))
    assert closes == [1]  # the count is released even though the generator never ran
    assert body.finalized is False
