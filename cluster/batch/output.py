"""The output file of a batch job: append-only JSONL, one finished row a line (its format:
cluster/batch/records.py).

Nothing lost, nothing twice:
- one writer: the driver holds an exclusive `flock` on the file while it runs, so a resubmitted job
  cannot interleave with a driver that is still alive;
- each row is one `write(2)` of a complete line to an `O_APPEND` descriptor, `fsync`ed within
  `FSYNC_PERIOD_S` (by the next write or by `sync_forever`, whichever comes first): a killed driver
  loses no written row (the kernel holds it), a crashed machine at most the last second's rows,
  which a re-run redoes;
- a failed write (disk full, I/O error) cuts the file back to its last complete line and raises
  `OutputFailed`: the driver stops there;
- opening the file checks that its directory takes a new file, reads the rows already there
  (`records`, for the resume plan) and truncates a torn last line (one without its newline), so a
  re-run appends after the last complete row;
- lines are removed only by `remove_lines`: a new file written beside it, `fsync`ed and renamed
  over it, so a reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster.batch.records import OutputRecord

FSYNC_PERIOD_S = 0.8  # a written line is fsynced within this (+ SYNC_POLL_S, so within 1 s)
SYNC_POLL_S = 0.1


class OutputBusy(RuntimeError):
    """Another process holds the output file's lock."""


class OutputFailed(RuntimeError):
    """The output file or its directory cannot be written (disk full, read-only, missing, I/O
    error); the file holds complete lines only."""




@dataclass(slots=True)
class Existing:
    """The output file as opened.

    Attributes:
        records: its complete lines that are JSON rows, in file order.
        unreadable: complete lines that are not JSON rows (not written by this tool); kept.
        truncated_bytes: bytes of a torn last line removed on open.
    """

    records: list[OutputRecord] = field(default_factory=list)
    unreadable: int = 0
    truncated_bytes: int = 0

    @property
    def rows(self) -> int:
        return len(self.records)


class OutputFile:
    """The locked, append-only output file; `existing` is what it held when opened.

    Raises:
        OutputBusy: another live driver writes the same file.
        OutputFailed: the directory does not take a new file, or the file cannot be opened for
            writing (the message names the path and the reason).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        check_writable(self.path.parent)
        while True:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                raise OutputFailed(f"{self.path}: cannot open for writing ({_reason(e)})"
                                   ) from None
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._fd)
                raise OutputBusy(f"{self.path}: another batch driver is writing it (stop that "
                                 "job first, or choose another --output)") from None
            if _same_file(self._fd, self.path):
                break
            os.close(self._fd)  # a driver's `remove_lines` renamed a new file over it: again
        self.existing = self._recover()
        self._dirty_since: float | None = None  # monotonic time of the oldest unsynced write

    def _recover(self) -> Existing:
        done = Existing()
        good_end = 0
        with open(self.path, "rb") as f:
            for index, raw in enumerate(f):
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
                done.records.append(OutputRecord.parse(index, record))
        size = os.fstat(self._fd).st_size
        if size > good_end:
            os.ftruncate(self._fd, good_end)
            os.fsync(self._fd)
            done.truncated_bytes = size - good_end
        return done

    def write(self, record: dict) -> None:
        """Appends one complete line; `fsync`s when the oldest unsynced line is
        `FSYNC_PERIOD_S` old.

        Raises:
            OutputFailed: the write failed (e.g. disk full); the file is cut back to its last
                complete line first, so no torn line stays and later rows never append to one.
        """
        data = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as e:
            try:
                os.ftruncate(self._fd, end)
            except OSError as cut:
                raise OutputFailed(f"{self.path}: write failed ({_reason(e)}), and cutting the "
                                   f"partial line failed too ({_reason(cut)}); a re-run removes "
                                   "it") from None
            raise OutputFailed(f"{self.path}: write failed ({_reason(e)})") from None
        now = time.monotonic()
        if self._dirty_since is None:
            self._dirty_since = now
        if now - self._dirty_since >= FSYNC_PERIOD_S:
            self.sync()

    def sync(self) -> None:
        """`fsync`s the lines written so far.

        Raises:
            OutputFailed: the fsync failed (lines since the last one may not be on disk).
        """
        self._dirty_since = None
        try:
            os.fsync(self._fd)
        except OSError as e:
            raise OutputFailed(f"{self.path}: fsync failed ({_reason(e)})") from None

    async def sync_forever(self) -> None:
        """Keeps `write`'s promise when no further write comes: every line `fsync`ed within
        `FSYNC_PERIOD_S` + `SYNC_POLL_S` of its write (cancel to stop).

        Raises:
            OutputFailed: an fsync failed.
        """
        while True:
            due = self._dirty_since
            wait_s = SYNC_POLL_S if due is None else due + FSYNC_PERIOD_S - time.monotonic()
            await asyncio.sleep(max(0.0, min(wait_s, SYNC_POLL_S)))
            if self._dirty_since is not None and \
                    time.monotonic() - self._dirty_since >= FSYNC_PERIOD_S:
                self.sync()

    def remove_lines(self, indexes: set[int]) -> None:
        """Rewrites the file without its complete lines at `indexes` (0-based, as in
        `existing.records`), atomically: a new file in the same directory, `fsync`ed, renamed
        over this one; the lock is taken on the new file before the rename.

        Raises:
            OutputFailed: the rewrite failed (e.g. disk full); the file is unchanged.
        """
        tmp_fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                       suffix=".rewrite")
        try:
            fcntl.flock(tmp_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with open(self.path, "rb") as f:
                for index, raw in enumerate(f):
                    if index not in indexes:
                        view = memoryview(raw)
                        while view:
                            view = view[os.write(tmp_fd, view):]
            os.fchmod(tmp_fd, os.fstat(self._fd).st_mode & 0o7777)
            os.fsync(tmp_fd)
            os.rename(tmp, self.path)
        except OSError as e:
            os.close(tmp_fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise OutputFailed(f"{self.path}: rewriting it without {len(indexes)} superseded "
                               f"lines failed ({_reason(e)}); it is unchanged") from None
        _fsync_dir(self.path.parent)
        os.close(self._fd)
        self._fd = tmp_fd
        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags | os.O_APPEND)

    def close(self) -> None:
        """Flushes to disk and releases the lock.

        Raises:
            OutputFailed: the final fsync failed (the lock is released all the same).
        """
        if self._fd < 0:
            return
        try:
            self.sync()
        finally:
            os.close(self._fd)
            self._fd = -1


def check_writable(directory: Path) -> None:
    """Creates, writes one byte to, and removes a file in `directory`: the output lands there,
    and rewrites (`remove_lines`) need a new file beside it.

    Raises:
        OutputFailed: naming the directory and the reason (missing, read-only, full).
    """
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".specserve-batch-probe-")
    except OSError as e:
        raise OutputFailed(f"{directory}: cannot create files there ({_reason(e)})") from None
    try:
        os.write(fd, b"\n")
    except OSError as e:
        raise OutputFailed(f"{directory}: cannot write there ({_reason(e)})") from None
    finally:
        os.close(fd)
        os.unlink(probe)


def _reason(e: OSError) -> str:
    return f"{e.strerror or e}, errno {e.errno}" if e.errno else str(e)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def _fsync_dir(directory: Path) -> None:
    """Makes a rename in `directory` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
