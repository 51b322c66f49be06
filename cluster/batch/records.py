"""One line of a batch job's output: its format (OpenAI Batch API), what resuming reads back
from it, and the lines a run writes.

    {"id": "batch_req_3", "custom_id": "row-1", "error": null,
     "response": {"status_code": 200, "request_id": "cmpl-...", "headers": {"x-specserve-route":
                  "speculative", ...}, "body": {...the /v1/completions response...}},
     "fingerprint": {"row": "3f2a...", "config": "9c41..."}}
    {"id": "batch_req_7", "custom_id": null, "response": null,
     "error": {"code": "invalid_json", "message": "line 7: not JSON (...)", "line": 7},
     "fingerprint": {"row": "b7e0...", "config": "9c41..."}}

`id` is `batch_req_<input line>`. A request the engine or router refused carries its HTTP status
and error body in `response` (as the OpenAI Batch API does); a line that never ran carries
`error`. `fingerprint` (an extension) says which input line and which config the line answers
(cluster/batch/resume.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.batch.rows import LINE_KEYED_CODES, BatchRow, RowError


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """What resuming needs of one line already in the output.

    Attributes:
        index: 0-based position among the file's complete lines.
        key: the custom_id, or the input line number of a line-keyed error (malformed line,
            duplicate custom_id): `row_key` of the input row it answers.
        row_fingerprint: the input line's fingerprint (None: written without one).
        config_fingerprint: the config's fingerprint (None: written without one).
        answered: a 2xx response, i.e. generated output (an error line or a 4xx refusal is not).
    """

    index: int
    key: str | int | None
    row_fingerprint: str | None
    config_fingerprint: str | None
    answered: bool

    @classmethod
    def parse(cls, index: int, record: dict) -> OutputRecord:
        error = record.get("error")
        key = (error.get("line") if isinstance(error, dict) and error.get("code") in
               LINE_KEYED_CODES else record.get("custom_id"))
        response = record.get("response")
        answered = isinstance(response, dict) and isinstance(response.get("status_code"), int) \
            and response["status_code"] < 400
        fp = record.get("fingerprint")
        fp = fp if isinstance(fp, dict) else {}
        return cls(index, key, fp.get("row"), fp.get("config"), answered)


def row_key(row: BatchRow | RowError) -> str | int:
    """The key an input row's output line is found by: its custom_id, or its line number when
    its custom_id is missing or belongs to an earlier line."""
    if isinstance(row, RowError) and row.line_keyed:
        return row.line
    return row.custom_id


def response_record(row: BatchRow, status_code: int, body: dict, headers: dict[str, str],
                    config_fingerprint: str) -> dict:
    """The output line of a row the engine answered (2xx, or its 4xx error body)."""
    return {"id": f"batch_req_{row.line}", "custom_id": row.custom_id,
            "response": {"status_code": status_code, "request_id": body.get("id"),
                         "headers": headers, "body": body},
            "error": None,
            "fingerprint": {"row": row.fingerprint, "config": config_fingerprint}}


def error_record(err: RowError, config_fingerprint: str) -> dict:
    """The output line of an input line that never ran."""
    return {"id": f"batch_req_{err.line}", "custom_id": err.custom_id, "response": None,
            "error": {"code": err.code, "message": err.message, "line": err.line},
            "fingerprint": {"row": err.fingerprint, "config": config_fingerprint}}
