"""Input rows of a batch job: the OpenAI Batch API's JSONL, one request a line.

    {"custom_id": "row-1", "method": "POST", "url": "/v1/completions",
     "body": {"model": "specserve-tiny", "prompt": "def parse(", "max_tokens": 64}}

`read_rows` yields a `BatchRow` for each line that can run and a `RowError` for each that cannot
(not JSON, no `custom_id`, another method or url, a body the endpoint would refuse, a `custom_id`
seen on an earlier line); every error names its 1-based line number. The body is parsed by the
same request models the online endpoint uses; the driver then runs the online router's own checks
(`RouteDecider.parse`) on it, so a batch row and an HTTP request agree on what is valid.

Each row carries its `fingerprint`: the first 16 hex digits of the SHA-256 of the line's JSON
object in canonical form (sorted keys, no spaces; the stripped text when it is not JSON), so
whitespace and key order do not count and any change of value does. The output records it beside
each answer (cluster/batch/resume.py).
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pydantic import ValidationError
from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest
from vllm.exceptions import VLLMClientError


class Endpoint(enum.Enum):
    """A batch row's `url`; the value is the pool deployment's method name."""

    COMPLETIONS = "completions"
    CHAT = "chat"


ENDPOINTS = {"/v1/completions": Endpoint.COMPLETIONS, "/v1/chat/completions": Endpoint.CHAT}
_REQUEST_MODELS = {Endpoint.COMPLETIONS: CompletionRequest, Endpoint.CHAT: ChatCompletionRequest}
# Error codes of rows that are keyed by line number, not custom_id, in the output (see
# cluster/batch/records.py): a malformed line has no usable custom_id, and a duplicate's custom_id
# belongs to its first occurrence.
LINE_KEYED_CODES = frozenset({"invalid_json", "invalid_custom_id", "duplicate_custom_id"})


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One runnable request.

    Attributes:
        line: 1-based line number in the input file.
        custom_id: the caller's id, unique in the file.
        endpoint: completions or chat.
        body: the validated request (the `route` extension field still in it).
        fingerprint: the line's content hash (module docstring).
    """

    line: int
    custom_id: str
    endpoint: Endpoint
    body: CompletionRequest | ChatCompletionRequest
    fingerprint: str


@dataclass(frozen=True, slots=True)
class RowError:
    """A line that cannot run; `message` starts with `line N:`.

    Attributes:
        line: 1-based line number in the input file.
        custom_id: the line's custom_id when it has a usable one, else None.
        code: invalid_json, invalid_custom_id, invalid_method, invalid_url, invalid_body,
            model_not_found or duplicate_custom_id.
        message: what is wrong, naming the line (and the field).
        fingerprint: the line's content hash (module docstring).
    """

    line: int
    custom_id: str | None
    code: str
    message: str
    fingerprint: str

    @property
    def line_keyed(self) -> bool:
        return self.code in LINE_KEYED_CODES


def parse_row(line: int, text: str, model_id: str) -> BatchRow | RowError:
    """Parses one input line (without its newline).

    Args:
        line: its 1-based line number.
        text: the line.
        model_id: the served model name; a body naming another model is refused (the online
            endpoint answers 404).
    """
    try:
        obj = json.loads(text)
    except ValueError as e:
        return RowError(line, None, "invalid_json", f"line {line}: not JSON ({e})",
                        _digest(text.strip()))
    fingerprint = _digest(json.dumps(obj, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False))

    def error(code: str, message: str, custom_id: str | None = None) -> RowError:
        return RowError(line, custom_id, code, f"line {line}: {message}", fingerprint)

    if not isinstance(obj, dict):
        return error("invalid_json", f"expected a JSON object, got {type(obj).__name__}")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return error("invalid_custom_id", "custom_id: required, a non-empty string")
    method = obj.get("method", "POST")
    if method != "POST":
        return error("invalid_method", f"method: must be POST, got {method!r}", custom_id)
    endpoint = ENDPOINTS.get(obj.get("url"))
    if endpoint is None:
        return error("invalid_url", f"url: must be one of {sorted(ENDPOINTS)}, got "
                     f"{obj.get('url')!r}", custom_id)
    body = obj.get("body")
    if not isinstance(body, dict):
        return error("invalid_body", "body: required, a JSON object", custom_id)
    if body.get("stream"):
        return error("invalid_body", "body.stream: not supported in a batch (each response is "
                     "written whole)", custom_id)
    try:
        request = _REQUEST_MODELS[endpoint].model_validate(body)
    except ValidationError as e:
        return error("invalid_body", _validation_message(e), custom_id)
    except VLLMClientError as e:  # vLLM's own validators (e.g. no prompt)
        param = getattr(e, "parameter", None)
        return error("invalid_body", f"body.{param}: {e}" if param else f"body: {e}", custom_id)
    if request.model != model_id:
        found = f"{request.model!r} is not served here" if request.model else "required"
        return error("model_not_found", f"body.model: {found} (served: {model_id!r})", custom_id)
    return BatchRow(line, custom_id, endpoint, request, fingerprint)


def read_rows(path: str | Path, model_id: str) -> Iterator[BatchRow | RowError]:
    """Every non-blank line of the input file, parsed, in order.

    A custom_id already seen on an earlier valid line makes a `duplicate_custom_id` error naming
    both lines: the first occurrence runs, the repeat is reported, never merged.
    """
    first_line: dict[str, int] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            row = parse_row(line, text.rstrip("\n"), model_id)
            custom_id = row.custom_id
            if custom_id is not None and not (isinstance(row, RowError) and row.line_keyed):
                if custom_id in first_line:
                    row = RowError(line, custom_id, "duplicate_custom_id",
                                   f"line {line}: custom_id {custom_id!r} repeats line "
                                   f"{first_line[custom_id]}; not run", row.fingerprint)
                else:
                    first_line[custom_id] = line
            yield row


def count_lines(path: str | Path) -> int:
    """Non-blank lines of the input (the progress total)."""
    with open(path, "rb") as f:
        return sum(1 for text in f if text.strip())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _validation_message(err: ValidationError) -> str:
    """`body.a.b: message` for the first three failing fields."""
    parts = [f"body.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"]
             else f"body: {e['msg']}" for e in err.errors()[:3]]
    more = len(err.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
