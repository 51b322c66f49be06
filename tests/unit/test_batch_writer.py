"""The order of a batch run's lines (cluster/batch/writer.py): as rows finish, or in input order."""

from __future__ import annotations

import asyncio
import errno
import json
import os

import pytest

from cluster.batch.output import OutputFailed, OutputFile
from cluster.batch.writer import RowWriter


def ids(path) -> list[str]:
    return [json.loads(t)["custom_id"] for t in path.read_text().splitlines()]


def run(ordered: bool, events: list[tuple[str, int]], path, window: int = 16) -> list[int]:
    """Takes 5 rows, then applies `events` ("put"/"drop", seq); returns the on_written order."""
    written: list[int] = []

    async def main() -> None:
        out = OutputFile(path)
        w = RowWriter(out, ordered, window)
        seqs = [await w.take() for _ in range(5)]
        assert seqs == [0, 1, 2, 3, 4]
        for kind, seq in events:
            if kind == "put":
                w.put(seq, {"custom_id": f"r{seq}"}, lambda s=seq: written.append(s))
            else:
                w.drop(seq)
        assert (w.taken, w.written) == (5, len(written))
        out.close()

    asyncio.run(main())
    return written


FINISH_ORDER = [("put", 3), ("put", 1), ("put", 0), ("put", 4), ("put", 2)]


def test_unordered_lines_follow_completion(tmp_path):
    assert run(False, FINISH_ORDER, tmp_path / "out.jsonl") == [3, 1, 0, 4, 2]
    assert ids(tmp_path / "out.jsonl") == ["r3", "r1", "r0", "r4", "r2"]


def test_ordered_lines_follow_the_input_once_a_prefix_is_complete(tmp_path):
    path = tmp_path / "out.jsonl"
    assert run(True, FINISH_ORDER, path) == [0, 1, 2, 3, 4]
    assert ids(path) == ["r0", "r1", "r2", "r3", "r4"]


def test_a_row_without_a_line_does_not_hold_the_rows_after_it(tmp_path):
    path = tmp_path / "out.jsonl"
    assert run(True, [("put", 2), ("put", 0), ("drop", 1), ("put", 4)], path) == [0, 2]
    assert ids(path) == ["r0", "r2"]  # r4 waits for row 3, still running when the run ends


def test_ordered_take_waits_for_room_in_the_window(tmp_path):
    async def main() -> list[str]:
        out = OutputFile(tmp_path / "out.jsonl")
        w = RowWriter(out, True, window=2)
        await w.take(), await w.take()
        third = asyncio.create_task(w.take())
        await asyncio.sleep(0.05)
        states = ["waiting" if not third.done() else "taken"]
        w.put(1, {"custom_id": "r1"}, lambda: None)  # held behind row 0: no room yet
        await asyncio.sleep(0.05)
        states.append("waiting" if not third.done() else "taken")
        w.put(0, {"custom_id": "r0"}, lambda: None)
        states.append(f"taken {await asyncio.wait_for(third, 1)}")
        out.close()
        return states

    assert asyncio.run(main()) == ["waiting", "waiting", "taken 2"]


def test_nothing_is_written_after_the_first_failed_write(tmp_path, monkeypatch):
    path = tmp_path / "out.jsonl"
    real_write = os.write

    async def main() -> RowWriter:
        out = OutputFile(path)
        w = RowWriter(out, True, window=3)
        for _ in range(3):
            await w.take()
        w.put(0, {"custom_id": "r0"}, lambda: None)
        w.put(2, {"custom_id": "r2"}, lambda: None)  # held behind row 1

        def disk_full(fd, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", disk_full)
        with pytest.raises(OutputFailed):
            w.put(1, {"custom_id": "r1"}, lambda: None)
        monkeypatch.setattr(os, "write", real_write)
        seq = await asyncio.wait_for(w.take(), 1)  # the failed rows' room is free: no deadlock
        w.put(seq, {"custom_id": "after"}, lambda: None)  # ignored: the writer has failed
        out.close()
        return w

    w = asyncio.run(main())
    assert ids(path) == ["r0"] and (w.written, w.failure is not None) == (1, True)
