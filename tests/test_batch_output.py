"""The batch output file: complete lines only, resume set, torn tail, one writer
(cluster/batch_output.py)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from cluster.batch_output import OutputBusy, OutputFile, error_record, response_record
from cluster.batch_rows import parse_row

MODEL = "specserve-tiny"


def row(custom_id: str, line: int = 1):
    return parse_row(line, json.dumps({"custom_id": custom_id, "url": "/v1/completions",
                                       "body": {"model": MODEL, "prompt": "x"}}), MODEL)


def test_records_follow_the_openai_batch_format():
    ok = response_record(row("a", 3), 200, {"id": "cmpl-1", "choices": []},
                         {"x-specserve-route": "vanilla"})
    assert ok == {"id": "batch_req_3", "custom_id": "a", "error": None,
                  "response": {"status_code": 200, "request_id": "cmpl-1",
                               "headers": {"x-specserve-route": "vanilla"},
                               "body": {"id": "cmpl-1", "choices": []}}}
    bad = error_record(parse_row(7, "{oops", MODEL))
    assert bad["custom_id"] is None and bad["response"] is None
    assert bad["error"]["code"] == "invalid_json" and bad["error"]["line"] == 7


def test_reopen_knows_finished_rows_by_custom_id_or_line(tmp_path):
    path = tmp_path / "out.jsonl"
    out = OutputFile(path)
    out.write(response_record(row("a"), 200, {"id": "x"}, {}))
    out.write(response_record(row("b", 2), 400, {"error": {"code": 400}}, {}))
    malformed, unwritten = parse_row(3, "{oops", MODEL), parse_row(4, "[]", MODEL)
    out.write(error_record(malformed))
    dup = type(malformed)(5, "a", "duplicate_custom_id", "line 5: custom_id 'a' repeats line 1")
    out.write(error_record(dup))
    out.close()
    assert all(text.endswith("\n") for text in path.read_text().splitlines(keepends=True))
    again = OutputFile(path)
    done = again.finished
    assert (done.rows, done.custom_ids, done.lines) == (4, {"a", "b"}, {3, 5})
    assert done.has(row("a")) and done.has(row("b", 2)) and done.has(malformed)
    assert done.has(dup) and not done.has(unwritten) and not done.has(row("c"))
    again.close()


def test_a_torn_last_line_is_cut_off_and_the_row_redone(tmp_path):
    path = tmp_path / "out.jsonl"
    complete = json.dumps(response_record(row("a"), 200, {"id": "x"}, {})) + "\n"
    path.write_text(complete + '{"id": "batch_req_2", "custom_id": "b", "resp')
    out = OutputFile(path)
    assert out.finished.custom_ids == {"a"} and out.finished.truncated_bytes > 0
    assert path.read_text() == complete
    out.write(response_record(row("b", 2), 200, {"id": "y"}, {}))
    out.close()
    assert [json.loads(t)["custom_id"] for t in path.read_text().splitlines()] == ["a", "b"]


def test_foreign_lines_are_counted_not_trusted(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("not json\n[1]\n")
    out = OutputFile(path)
    assert (out.finished.rows, out.finished.unreadable) == (0, 2)
    out.close()


def test_a_second_writer_is_refused_while_the_first_holds_the_file(tmp_path):
    path = tmp_path / "out.jsonl"
    first = OutputFile(path)
    with pytest.raises(OutputBusy, match="another batch driver"):
        OutputFile(path)
    first.close()
    OutputFile(path).close()  # released on close (and by the kernel when a driver dies)


def test_a_failed_write_leaves_no_torn_line(tmp_path, monkeypatch):
    path = tmp_path / "out.jsonl"
    out = OutputFile(path)
    out.write(response_record(row("a"), 200, {"id": "x"}, {}))
    before = path.read_bytes()
    real_write = os.write

    def disk_full(fd, data):  # writes a few bytes, then the disk is full
        real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError):
        out.write(response_record(row("b", 2), 200, {"id": "y"}, {}))
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == before
    out.write(response_record(row("c", 3), 200, {"id": "z"}, {}))
    out.close()
    assert [json.loads(t)["custom_id"] for t in path.read_text().splitlines()] == ["a", "c"]
