"""RelayedStream (router/streaming.py) under each way a stream can end, on Starlette's real
StreamingResponse machinery (ASGI send/receive driven directly); `relay_usage`, the usage chunk a
client sees."""

from __future__ import annotations

import asyncio
import json

import pytest
from ray.serve.llm.openai_api_models import CompletionRequest

from router.streaming import RelayedStream, relay_usage, wants_usage

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


def test_ray_serve_cancelling_the_request_is_a_disconnect_not_an_error():
    """Ray Serve's proxy cancels a request whose client went away; the replica's `receive` then
    raises TaskCancelledError. The stream ends as for a disconnect: no exception out of the
    response (the error handler would log it as an unhandled error), body closed, count released."""
    from ray.exceptions import TaskCancelledError

    body, closes, sent = _Body(packets=1000), [], []

    async def receive():
        await asyncio.sleep(0.02)
        raise TaskCancelledError()

    async def send(message):
        sent.append(message)
        await asyncio.sleep(0.001)

    async def run():  # Ray Serve's ASGI scope (spec 2.0-2.3): Starlette listens for disconnect
        await _stream(body, closes)({**SCOPE, "asgi": {"version": "3.0", "spec_version": "2.1"}},
                                    receive, send)
        return body.finalized

    assert (asyncio.run(run()), closes) == (True, [1])
    assert 0 < sum(1 for m in sent if m.get("body")) < 1000  # cut short, not sent in full


def test_closed_before_the_body_started():
    body, closes = _Body(), []

    async def send(message):
        raise OSError("gone before the headers")

    with pytest.raises(Exception):
        asyncio.run(_stream(body, closes)(SCOPE, _receive, send))
    assert closes == [1]  # the count is released even though the generator never ran
    assert body.finalized is False


def _sse(*chunks) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)


TOKEN = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "x"}]}
SPEC_USAGE = {"id": "c", "choices": [], "usage": {"completion_tokens": 3},
              "metrics": {"speculative_decoding": {"acceptance_histogram": [1, 2]}}}
VANILLA_USAGE = {"id": "c", "choices": [], "usage": {"completion_tokens": 3}}


def _relayed(packets: list[str], keep_usage: bool) -> tuple[list, list]:
    learned = []

    async def source():
        for p in packets:
            yield p

    async def run():
        return [p async for p in relay_usage(source(), keep_usage, learned.append)]

    out = asyncio.run(run())
    return [json.loads(e[6:]) for p in out for e in p.split("\n\n") if e.startswith("data: {")], \
        learned


@pytest.mark.parametrize("usage", [SPEC_USAGE, VANILLA_USAGE], ids=["speculative", "vanilla"])
def test_usage_is_dropped_when_the_client_did_not_ask(usage):
    # the vanilla case is a stream retried there after its speculative pool lost it: the ingress
    # had asked for usage on the client's behalf, and the vanilla chunk has no
    # `speculative_decoding` to recognize it by
    packets = [_sse(TOKEN), _sse(TOKEN) + _sse(usage) + "data: [DONE]\n\n"]
    chunks, learned = _relayed(packets, keep_usage=False)
    assert chunks == [TOKEN, TOKEN]
    assert learned == [usage]


def test_usage_the_client_asked_for_passes_and_is_learned():
    chunks, learned = _relayed([_sse(TOKEN), _sse(SPEC_USAGE), "data: [DONE]\n\n"], True)
    assert chunks == [TOKEN, SPEC_USAGE] and learned == [SPEC_USAGE]


def test_a_packet_of_only_usage_is_not_sent_empty():
    async def source():
        yield _sse(VANILLA_USAGE)
        yield "data: [DONE]\n\n"

    async def run():
        return [p async for p in relay_usage(source(), False, lambda chunk: None)]

    assert asyncio.run(run()) == ["data: [DONE]\n\n"]


def test_text_mentioning_usage_is_not_a_usage_chunk():
    token = {"id": "c", "choices": [{"index": 0, "text": 'the "usage" key'}]}
    chunks, learned = _relayed([_sse(token)], keep_usage=False)
    assert chunks == [token] and learned == []


@pytest.mark.parametrize("options, wanted", [(None, False), ({"include_usage": False}, False),
                                             ({"include_usage": True}, True)])
def test_wants_usage_reads_the_request(options, wanted):
    body = CompletionRequest(model="m", prompt="x", stream=True, stream_options=options)
    assert wants_usage(body) is wanted
