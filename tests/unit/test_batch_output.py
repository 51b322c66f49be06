"""The batch output file: complete lines only, what it holds on reopen, torn tail, one writer,
atomic rewrites, fsync within a second, unwritable directories (cluster/batch/output.py)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time

import pytest

from cluster.batch import output as batch_output
from cluster.batch.output import OutputBusy, OutputFailed, OutputFile
from cluster.batch.records import error_record, response_record, row_key
from cluster.batch.rows import RowError, parse_row

MODEL = "specserve-tiny"
CFG = "c0ffee"  # a config fingerprint


def row(custom_id: str, line: int = 1):
    return parse_row(line, json.dumps({"custom_id": custom_id, "url": "/v1/completions",
                                       "body": {"model": MODEL, "prompt": "x"}}), MODEL)


def test_records_follow_the_openai_batch_format():
    a = row("a", 3)
    ok = response_record(a, 200, {"id": "cmpl-1", "choices": []},
                         {"x-specserve-route": "vanilla"}, CFG)
    assert ok == {"id": "batch_req_3", "custom_id": "a", "error": None,
                  "response": {"status_code": 200, "request_id": "cmpl-1",
                               "headers": {"x-specserve-route": "vanilla"},
                               "body": {"id": "cmpl-1", "choices": []}},
                  "fingerprint": {"row": a.fingerprint, "config": CFG}}
    bad = error_record(parse_row(7, "{oops", MODEL), CFG)
    assert bad["custom_id"] is None and bad["response"] is None
    assert bad["error"]["code"] == "invalid_json" and bad["error"]["line"] == 7
    assert bad["fingerprint"]["config"] == CFG and len(bad["fingerprint"]["row"]) == 16


def test_reopen_reads_each_line_key_fingerprints_and_whether_it_answers(tmp_path):
    path = tmp_path / "out.jsonl"
    out = OutputFile(path)
    out.write(response_record(row("a"), 200, {"id": "x"}, {}, CFG))
    out.write(response_record(row("b", 2), 400, {"error": {"code": 400}}, {}, CFG))
    malformed = parse_row(3, "{oops", MODEL)
    out.write(error_record(malformed, CFG))
    dup = RowError(5, "a", "duplicate_custom_id", "line 5: custom_id 'a' repeats line 1", "f5")
    out.write(error_record(dup, CFG))
    out.close()
    assert all(text.endswith("\n") for text in path.read_text().splitlines(keepends=True))
    again = OutputFile(path)
    records = again.existing.records
    assert [(r.index, r.key, r.answered) for r in records] == [
        (0, "a", True), (1, "b", False), (2, 3, False), (3, 5, False)]
    assert [r.row_fingerprint for r in records] == [row("a").fingerprint, row("b").fingerprint,
                                                    malformed.fingerprint, "f5"]
    assert {r.config_fingerprint for r in records} == {CFG}
    assert [row_key(r) for r in (row("a"), malformed, dup)] == ["a", 3, 5]
    again.close()


def test_a_torn_last_line_is_cut_off_and_the_row_redone(tmp_path):
    path = tmp_path / "out.jsonl"
    complete = json.dumps(response_record(row("a"), 200, {"id": "x"}, {}, CFG)) + "\n"
    path.write_text(complete + '{"id": "batch_req_2", "custom_id": "b", "resp')
    out = OutputFile(path)
    assert [r.key for r in out.existing.records] == ["a"] and out.existing.truncated_bytes > 0
    assert path.read_text() == complete
    out.write(response_record(row("b", 2), 200, {"id": "y"}, {}, CFG))
    out.close()
    assert [json.loads(t)["custom_id"] for t in path.read_text().splitlines()] == ["a", "b"]


def test_foreign_lines_are_counted_not_trusted(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("not json\n[1]\n")
    out = OutputFile(path)
    assert (out.existing.rows, out.existing.unreadable) == (0, 2)
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
    out.write(response_record(row("a"), 200, {"id": "x"}, {}, CFG))
    before = path.read_bytes()
    real_write = os.write

    def disk_full(fd, data):  # writes a few bytes, then the disk is full
        real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OutputFailed, match="write failed.*No space left"):
        out.write(response_record(row("b", 2), 200, {"id": "y"}, {}, CFG))
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == before
    out.write(response_record(row("c", 3), 200, {"id": "z"}, {}, CFG))
    out.close()
    assert [json.loads(t)["custom_id"] for t in path.read_text().splitlines()] == ["a", "c"]


def lines(path) -> list[str]:
    return [json.loads(t)["custom_id"] for t in path.read_text().splitlines()]


def test_remove_lines_rewrites_atomically_and_keeps_the_lock(tmp_path):
    path = tmp_path / "out.jsonl"
    out = OutputFile(path)
    for i, cid in enumerate("abcd"):
        out.write(response_record(row(cid, i + 1), 200, {"id": cid}, {}, CFG))
    inode = os.stat(path).st_ino
    out.remove_lines({1, 3})
    assert lines(path) == ["a", "c"] and os.stat(path).st_ino != inode  # a new file, renamed
    with pytest.raises(OutputBusy):  # the lock moved to the new file
        OutputFile(path)
    out.write(response_record(row("e", 5), 200, {"id": "e"}, {}, CFG))  # appends to the new one
    out.close()
    assert lines(path) == ["a", "c", "e"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary file left


def test_a_failed_rewrite_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "out.jsonl"
    out = OutputFile(path)
    for i, cid in enumerate("abc"):
        out.write(response_record(row(cid, i + 1), 200, {"id": cid}, {}, CFG))
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OutputFailed, match="unchanged"):
        out.remove_lines({0})
    monkeypatch.undo()
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    out.close()


def test_a_line_is_fsynced_within_a_second_when_no_further_write_comes(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(time.monotonic()), real_fsync(fd)))
    out = OutputFile(tmp_path / "out.jsonl")
    synced.clear()

    async def one_write_then_quiet() -> float:
        syncer = asyncio.create_task(out.sync_forever())
        await asyncio.sleep(0.05)
        written_at = time.monotonic()
        out.write(response_record(row("a"), 200, {"id": "x"}, {}, CFG))
        await asyncio.sleep(1.3)
        syncer.cancel()
        return written_at

    written_at = asyncio.run(one_write_then_quiet())
    assert len(synced) == 1 and 0 < synced[0] - written_at <= 1.0
    out.close()


def test_a_directory_that_takes_no_file_is_refused_on_open(tmp_path):
    with pytest.raises(OutputFailed, match="missing: cannot create files there.*No such file"):
        OutputFile(tmp_path / "missing" / "out.jsonl")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OutputFailed, match="a-file: cannot create files there.*Not a directory"):
        OutputFile(tmp_path / "a-file" / "out.jsonl")
    batch_output.check_writable(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]  # the probe is gone
