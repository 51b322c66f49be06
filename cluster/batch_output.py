"""The output file of a batch job: append-only JSONL, one finished row a line (OpenAI Batch API).

    {"id": "batch_req_3", "custom_id": "row-1", "error": null,
     "response": {"status_code": 200, "request_id": "cmpl-...", "headers": {"x-specserve-route":
                  "speculative", ...}, "body": {...the /v1/completions response...}}}
    {"id": "batch_req_7", "custom_id": null, "response": null,
     "error": {"code": "invalid_json", "message": "line 7: not JSON (...)", "line": 7}}

`id` is `batch_req_<input line>`. A request the engine refused carries its HTTP status and error
body in `response` (as the OpenAI Batch API does); a line that never ran carries `error`.

Nothing lost, nothing twice:
- one writer: the driver holds an exclusive `flock` on the file while it runs, so a resubmitted job
  cannot interleave with a driver that is still alive;
- each row is one `write(2)` of a complete line to an `O_APPEND` descriptor, `fsync`ed at most
  `FSYNC_PERIOD_S` later (and at close): a killed driver loses no written row (the kernel holds
  it), a crashed machine at most the last second's rows, which a re-run redoes;
- opening the file reads the rows already there (`Finished`, the resume set) and truncates a torn
  last line (one without its newline), so a re-run appends after the last complete row.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster.batch_rows import LINE_KEYED_CODES, BatchRow, RowError

FSYNC_PERIOD_S = 1.0


class OutputBusy(RuntimeError):
    """Another process holds the output file's lock."""


@dataclass(slots=True)
class Finished:
    """Rows already in the output file.

    Attributes:
        custom_ids: custom_ids with a line (a response or an error of their own).
        lines: input line numbers of line-keyed errors (malformed lines, duplicates).
        rows: complete lines read.
        unreadable: complete lines that are not JSON rows (not written by this tool); skipped.
        truncated_bytes: bytes of a torn last line removed on open.
    """

    custom_ids: set[str] = field(default_factory=set)
    lines: set[int] = field(default_factory=set)
    rows: int = 0
    unreadable: int = 0
    truncated_bytes: int = 0

    def add(self, record: dict) -> None:
        """Marks an output record's input row finished."""
        error = record.get("error")
        if error and error.get("code") in LINE_KEYED_CODES:
            self.lines.add(error.get("line"))
        else:
            self.custom_ids.add(record.get("custom_id"))
        self.rows += 1

    def has(self, row: BatchRow | RowError) -> bool:
        """Whether the input row already has its output line."""
        if isinstance(row, RowError) and row.line_keyed:
            return row.line in self.lines
        return row.custom_id in self.custom_ids


class OutputFile:
    """The locked, append-only output file; `finished` is what it held when opened.

    Raises:
        OutputBusy: another live driver writes the same file.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise OutputBusy(f"{self.path}: another batch driver is writing it (stop that job "
                             "first, or choose another --output)") from None
        self.finished = self._recover()
        self._synced_at = time.monotonic()

    def _recover(self) -> Finished:
        done = Finished()
        good_end = 0
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # torn: the driver died inside this write
                good_end += len(raw)
                try:
                    record = json.loads(raw)
                    if not isinstance(record, dict):
                        raise ValueError("not an object")
                except ValueError:
                    done.unreadable += 1
                    continue
                done.add(record)
        size = os.fstat(self._fd).st_size
        if size > good_end:
            os.ftruncate(self._fd, good_end)
            os.fsync(self._fd)
            done.truncated_bytes = size - good_end
        return done

    def write(self, record: dict) -> None:
        """Appends one complete line; `fsync`s when the last one is `FSYNC_PERIOD_S` old.

        Raises:
            OSError: the write failed (e.g. disk full); the file is cut back to its last complete
                line first, so later rows never append to a torn one.
        """
        data = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            os.ftruncate(self._fd, end)
            raise
        now = time.monotonic()
        if now - self._synced_at >= FSYNC_PERIOD_S:
            os.fsync(self._fd)
            self._synced_at = now

    def close(self) -> None:
        """Flushes to disk and releases the lock."""
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def response_record(row: BatchRow, status_code: int, body: dict, headers: dict[str, str]) -> dict:
    """The output line of a row the engine answered (2xx, or its 4xx error body)."""
    return {"id": f"batch_req_{row.line}", "custom_id": row.custom_id,
            "response": {"status_code": status_code, "request_id": body.get("id"),
                         "headers": headers, "body": body},
            "error": None}


def error_record(err: RowError) -> dict:
    """The output line of an input line that never ran."""
    return {"id": f"batch_req_{err.line}", "custom_id": err.custom_id, "response": None,
            "error": {"code": err.code, "message": err.message, "line": err.line}}
