"""OpenAI error JSON, as vLLM's server writes it: `{"error": {"message", "type", "param", "code"}}`
with `code` the HTTP status and `type` its name (`BadRequestError`, `NotFoundError`, ...), so a
client sees one format whether the ingress or the engine refused the request."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from ray.llm._internal.serve.core.configs.openai_api_models import OpenAIHTTPException
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from vllm.exceptions import VLLMClientError

logger = logging.getLogger("specserve.router")

_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
          404: "NotFoundError", 405: "MethodNotAllowed", 408: "RequestTimeout",
          413: "RequestEntityTooLarge", 422: "UnprocessableEntityError", 429: "RateLimitError",
          500: "InternalServerError", 503: "ServiceUnavailableError"}


def error_response(status: int, message: str, param: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    """An OpenAI-format error with HTTP status `status`."""
    body = {"error": {"message": message, "type": _TYPES.get(status, "Error"), "param": param,
                      "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


class RequestError(Exception):
    """A request the ingress refuses; becomes `error_response(status, message, param)`."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


def install_error_handlers(app: FastAPI) -> None:
    """Maps every exception a handler can raise to OpenAI error JSON (no HTML, no stack traces)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        if first.get("type") == "json_invalid":
            return error_response(400, f"Request body is not valid JSON: {first.get('msg')}")
        msg = first.get("msg", "invalid request").removeprefix("Value error, ")
        return error_response(400, f"{param}: {msg}" if param else msg, param)

    @app.exception_handler(VLLMClientError)
    async def _vllm_invalid(request: Request, exc: VLLMClientError) -> JSONResponse:
        # vLLM's request models validate some fields with their own exception (e.g. no prompt).
        return error_response(400, str(exc), getattr(exc, "parameter", None))

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param)

    @app.exception_handler(OpenAIHTTPException)
    async def _openai(request: Request, exc: OpenAIHTTPException) -> JSONResponse:
        return error_response(exc.status_code, exc.message)

    @app.exception_handler(HTTPException)  # Starlette's: routing's 404 / 405 too, not only ours
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s", request.url.path)
        return error_response(500, "Internal server error")
