"""A streaming response that always releases what its stream holds.

Starlette's `StreamingResponse` leaves its body generator to the garbage collector when the client
goes away (the send fails, or the request task is cancelled while it waits on `send`), so a
`finally:` inside the generator runs late, or never when the body was not started. The ingress
counts a stream in flight until it ends; seen on real pools: abandoned streams stayed counted for
seconds to minutes. `RelayedStream` closes the body and calls `on_close` exactly once, whatever
way the response ends.
"""

from __future__ import annotations

from typing import Callable

from starlette.responses import StreamingResponse


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
        try:
            await super().__call__(scope, receive, send)
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
