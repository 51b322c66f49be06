"""The request-body limit (`server.max_body_bytes`), enforced on the bytes received.

A body sent with `Transfer-Encoding: chunked` carries no `Content-Length`, and a declared length
proves nothing, so the limit is counted on the ASGI receive channel: the message that takes the
body above the limit raises a 413 before the body is parsed, and nothing past it is read.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from router.errors import error_response


class BodyTooLarge(HTTPException):
    """Raised from `receive` once the body exceeds the limit; the app's error handlers turn it
    into a 413 in OpenAI error JSON (router/errors.py)."""

    def __init__(self, max_body_bytes: int):
        super().__init__(413, too_large_message(max_body_bytes))


def too_large_message(max_body_bytes: int) -> str:
    return f"Request body larger than {max_body_bytes} bytes"


class BodyLimit:
    """ASGI middleware: 413 for a body above `max_body_bytes` bytes, declared or received.

    A declared `Content-Length` above the limit (or not a number) is refused before the app runs.
    Otherwise `receive` counts the body bytes and raises `BodyTooLarge` past the limit; if the app
    answers anything else after that (it swallowed the error), the 413 replaces its answer.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            return await self._refuse(scope, receive, send)
        received, over, started = 0, False, False

        async def limited_receive() -> Message:
            nonlocal received, over
            if over:
                raise BodyTooLarge(self.max_body_bytes)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    over = True
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                if over and message["status"] != 413:
                    return  # an answer to a body the app never got whole: replaced below
                started = True  # the app's own 413 (the error handler's JSON) goes through
            elif over and not started:
                return
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            if started:
                raise
        if over and not started:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await error_response(413, too_large_message(self.max_body_bytes))(scope, receive, send)
