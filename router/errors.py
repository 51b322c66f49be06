"""OpenAI error JSON, as vLLM's server writes it: `{"error": {"message", "type", "param", "code"}}`
with `code` the HTTP status and `type` its name (`BadRequestError`, `NotFoundError`, ...), so a
client sees one format whether the ingress or the engine refused the request."""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from vllm.exceptions import VLLMClientError

from core.ray_private import OpenAIHTTPException

logger = logging.getLogger("specserve.router")

_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
          404: "NotFoundError", 405: "MethodNotAllowed", 408: "RequestTimeout",
          413: "RequestEntityTooLarge", 422: "UnprocessableEntityError", 429: "RateLimitError",
          500: "InternalServerError", 503: "ServiceUnavailableError"}


# vLLM's answer to a request body that is not `application/json` (400, as its server sends it)
UNSUPPORTED_MEDIA_TYPE = "Unsupported Media Type: Only 'application/json' is allowed"


# vLLM's VLLMValidationError writes its parameter into the message ("... (parameter=logprobs,
# value=100)"); Ray Serve LLM's ingress keeps only the message of an engine's ErrorResponse.
_ENGINE_PARAM = re.compile(r"\(parameter=([A-Za-z_][\w.]*)")


def engine_error_param(message: str) -> str | None:
    """The request field an engine's error message names (vLLM's `(parameter=NAME, ...)`), or
    None."""
    match = _ENGINE_PARAM.search(message)
    return match.group(1) if match else None


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
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if request.method == "POST" and media_type != "application/json":
            # FastAPI leaves a body of another media type, or of none, unparsed ("Input should be
            # a valid dictionary"); vLLM's server answers this (api_utils.validate_json_request)
            return error_response(400, UNSUPPORTED_MEDIA_TYPE)
        if first.get("type") == "json_invalid":
            return error_response(400, f"Request body is not valid JSON: {first.get('msg')}")
        param, message = describe_validation_error(errs)
        return error_response(400, message, param)

    @app.exception_handler(VLLMClientError)
    async def _vllm_invalid(request: Request, exc: VLLMClientError) -> JSONResponse:
        # vLLM's request models validate some fields with their own exception (e.g. no prompt).
        return error_response(400, str(exc), getattr(exc, "parameter", None))

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param)

    @app.exception_handler(OpenAIHTTPException)
    async def _openai(request: Request, exc: OpenAIHTTPException) -> JSONResponse:
        return error_response(exc.status_code, exc.message, engine_error_param(exc.message))

    @app.exception_handler(HTTPException)  # Starlette's: routing's 404 / 405 too, not only ours
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s", request.url.path)
        return error_response(500, "Internal server error")


def describe_validation_error(errors: list[dict]) -> tuple[str | None, str]:
    """`(param, message)` of a request model's validation errors (pydantic `errors()` dicts).

    A union field (`prompt`: token ids, token-id lists, a string or strings; `stop`: a string or
    up to 4 strings) fails once per member: `stop: [10 strings]` is "not a valid string" for the
    `str` member and "at most 4 items" for the list member. The member whose type matched and whose
    constraint failed is the one meant, so a constraint error is preferred over type mismatches of
    the same field; the member's tag (`list[str]`) is dropped and `param` is the top-level field.
    """
    if not errors:
        return None, "invalid request"
    locs = [[p for p in e.get("loc", ()) if p != "body"] for e in errors]
    chosen, loc = errors[0], locs[0]
    if loc:
        same = [(e, lc) for e, lc in zip(errors, locs) if lc and lc[0] == loc[0]]
        union = len({str(lc[1]) for _, lc in same if len(lc) > 1}) > 1
        if union:
            chosen, loc = next(((e, lc) for e, lc in same if not _type_mismatch(e)), (chosen, loc))
            loc = loc[:1] + loc[2:]  # drop the union member's tag
            where = "".join(f"[{p}]" for p in loc[1:])
            msg = chosen.get("msg", "invalid").removeprefix("Value error, ")
            given = chosen.get("input")
            if isinstance(given, (int, float)) and not _type_mismatch(chosen):
                msg += f", got {given!r}"
            return str(loc[0]), f"{loc[0]}{where}: {msg}"
    param = ".".join(str(p) for p in loc) or None
    msg = chosen.get("msg", "invalid request").removeprefix("Value error, ")
    return param, f"{param}: {msg}" if param else msg


def _type_mismatch(error: dict) -> bool:
    kind = error.get("type", "")
    return kind.endswith("_type") or kind.endswith("_parsing")
