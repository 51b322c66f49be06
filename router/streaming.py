"""Relaying a pool's response to the client, and the pool failures around it.

Before the response: a request waiting on a pool whose last replica left the StatsBoard is
abandoned (`await_unless_gone` raises `PoolLost`) and may be retried on the other pool, as may one
that failed with one of `REPLICA_FAILURES`: Serve's DeploymentHandle queues a request for a
deployment with no running replica until one starts (minutes for a vLLM engine; ray-project/ray
#40995), so a request caught between a replica's death and the board noticing would otherwise hang.

During the response: Starlette's `StreamingResponse` leaves its body generator to the garbage
collector when the client goes away (the send fails, or the request task is cancelled while it
waits on `send`), so a `finally:` inside the generator runs late, or never when the body was not
started. The ingress counts a stream in flight until it ends; seen on real pools: abandoned streams
stayed counted for seconds to minutes. `RelayedStream` closes the body and calls `on_close` exactly
once, whatever way the response ends. `relay_usage` decides, per stream, what the client sees of
the usage chunk; `guard_stream` ends a stream whose pool failed mid-way with an OpenAI error event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from ray.exceptions import NodeDiedError, RayActorError, TaskCancelledError, WorkerCrashedError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, \
    ReplicaUnavailableError
from starlette.responses import StreamingResponse

from router.errors import error_response

if TYPE_CHECKING:
    from router.decider import PoolHealth

logger = logging.getLogger("specserve.router")


# What a DeploymentHandle raises when the replica serving a request died, was unreachable or
# refused it (its queue full): the request never ran to an answer, so it may be retried.
REPLICA_FAILURES = (RayActorError, WorkerCrashedError, NodeDiedError, ReplicaUnavailableError,
                    DeploymentUnavailableError, BackPressureError)


class PoolLost(Exception):
    """The pool's last replica left the StatsBoard while a request waited for its response."""

    def __init__(self, pool: str):
        super().__init__(f"the {pool} pool has no live replica")
        self.pool = pool


async def await_unless_gone(work: Awaitable[Any], pool: str, health: PoolHealth, period_s: float,
                            release: Callable[[Any], Awaitable[None]] | None = None) -> Any:
    """The result of `work` (a request to `pool`), checking every `period_s` seconds that `pool`
    is not gone (`PoolHealth.gone`).

    Raises:
        PoolLost: `pool` went while `work` ran; `work` was cancelled first.
    Cancelling the caller cancels `work` too. Where `work` finishes anyway as it is cancelled,
    `release(result)` disposes of the result nobody will read.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=period_s)
            if done:
                return task.result()
            if health.gone(pool):
                raise PoolLost(pool)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            if release is not None and not task.cancelled() and task.exception() is None:
                await release(task.result())


class RelayedStream(StreamingResponse):
    """`StreamingResponse` with a guaranteed end.

    Args:
        body: the async iterator of SSE packets.
        on_close: called once when the response ends: sent in full, client gone, or cancelled.
        status_code, headers, media_type: as for StreamingResponse.
    """

    def __init__(self, body, on_close: Callable[[], None], *, status_code: int = 200,
                 headers: dict | None = None, media_type: str | None = None):
        super().__init__(body, status_code=status_code, headers=headers, media_type=media_type)
        self._on_close = on_close
        self._closed = False

    async def __call__(self, scope, receive, send) -> None:
        async def receive_or_disconnect():
            # Ray Serve's proxy cancels a request whose client went away, and the replica's
            # `receive` then raises TaskCancelledError where ASGI expects an http.disconnect
            # message: Starlette would let it out as an unhandled error (logged with a traceback).
            try:
                return await receive()
            except TaskCancelledError:
                return {"type": "http.disconnect"}
        try:
            await super().__call__(scope, receive_or_disconnect, send)
        finally:
            await self.close()

    async def close(self) -> None:
        """Closes the body (running its `finally:` blocks) and calls `on_close`; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            self._on_close()


def wants_usage(body) -> bool:
    """Whether the client asked for a stream's usage chunk (`stream_options.include_usage`)."""
    return bool(body.stream_options and body.stream_options.include_usage)


async def relay_usage(packets: AsyncIterator[str], keep_usage: bool,
                      learn: Callable[[dict], None]) -> AsyncIterator[str]:
    """SSE packets through, with the usage chunk seen and, unless asked for, dropped.

    The ingress asks every stream for its usage chunk (`data: {"choices": [], "usage": ...}`, the
    one that carries a speculative stream's `metrics.speculative_decoding`): `learn` gets each
    usage chunk's JSON, and a client that did not ask for usage (`keep_usage` False) never sees
    one, whichever pool the stream ended up on.

    Args:
        packets: the pool's SSE text, one or more `data: ...\\n\\n` events per packet.
        keep_usage: the client asked for usage (`wants_usage` of its request).
        learn: called with each usage chunk's JSON.
    """
    async for packet in packets:
        if '"usage"' not in packet:  # every other packet passes unparsed
            yield packet
            continue
        kept = []
        for event in packet.split("\n\n"):
            if event.startswith("data: {") and '"usage"' in event:
                chunk = json.loads(event[6:])
                if chunk.get("choices") == [] and chunk.get("usage"):
                    learn(chunk)
                    if not keep_usage:
                        continue
            kept.append(event)
        packet = "\n\n".join(kept)
        if packet.strip():
            yield packet


async def guard_stream(packets: AsyncIterator[str], route: str,
                       on_failure: Callable[[str, Exception], None]) -> AsyncIterator[str]:
    """SSE packets through; a pool failure after the stream began ends it with an OpenAI error
    event and `[DONE]` (`sse_error`), never by hanging or a cut connection: the client has output,
    so it cannot be retried. `on_failure(route, error)` is told first. Closing this generator
    closes `packets`.
    """
    try:
        async for packet in packets:
            yield packet
    except Exception as e:  # not BaseException: cancellation (client gone) propagates
        on_failure(route, e)
        logger.warning(json.dumps({"event": "stream_failure", "route": route,
                                   "error": type(e).__name__}))
        yield sse_error(503, f"The {route} pool failed mid-stream ({type(e).__name__}); "
                        "the output so far is incomplete")
    finally:
        aclose = getattr(packets, "aclose", None)
        if aclose is not None:  # cancels the pool's request if it still runs
            await aclose()


def sse_error(status: int, message: str) -> str:
    """An OpenAI error event followed by the end of the stream."""
    body = json.loads(error_response(status, message).body)
    return f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n"
