"""Which order a batch run's lines reach the output: as rows finish, or (`--ordered`) in input
order.

Ordered, a finished row waits until every row this run took before it has its line or is known to
get none in this run (it gave up, or the run stops); so each run appends its lines in input order,
after the lines of earlier runs. Rows finished behind a slow one are held in memory, at most
`window` rows taken and not yet written (the dispatcher waits beyond it).

Unordered (the default, as the OpenAI Batch API), a line is written the moment its row finishes;
join answers to inputs by `custom_id`.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from cluster.batch.output import OutputFailed, OutputFile


class RowWriter:
    """Writes each row's record in completion or input order; stops writing at the first failure.

    Args:
        out: the output file.
        ordered: input order.
        window: ordered only: rows taken and not yet written or dropped, at most (>= 1).
    """

    def __init__(self, out: OutputFile, ordered: bool, window: int):
        self._out = out
        self._ordered = ordered
        self._room = asyncio.Semaphore(window) if ordered else None
        self._next = 0  # ordered: sequence number of the next line to write
        self._held: dict[int, tuple[dict, Callable[[], None]] | None] = {}  # None: no line
        self.taken = 0
        self.written = 0
        self.failure: OutputFailed | None = None

    async def take(self) -> int:
        """The sequence number of the next row in input order; ordered, waits while `window`
        rows are taken and not yet written or dropped."""
        if self._room is not None:
            await self._room.acquire()
        self.taken += 1
        return self.taken - 1

    def put(self, seq: int, record: dict, on_written: Callable[[], None]) -> None:
        """A finished row's record: written now, or (ordered) once every earlier row is written
        or dropped; `on_written` runs once its line is written. Nothing is written after a
        failure.

        Raises:
            OutputFailed: this or a held line failed to write (kept in `failure`).
        """
        if not self._ordered:
            if self.failure is None:
                self._write(record, on_written)
            return
        self._held[seq] = (record, on_written)
        self._flush()

    def drop(self, seq: int) -> None:
        """The row gets no line in this run: later rows do not wait for it.

        Raises:
            OutputFailed: a held line failed to write.
        """
        if self._ordered:
            self._held[seq] = None
            self._flush()

    def _flush(self) -> None:
        try:
            while self.failure is None and self._next in self._held:
                item = self._held.pop(self._next)
                self._next += 1
                self._room.release()
                if item is not None:
                    self._write(*item)
        finally:
            if self.failure is not None:  # no line after a failure: free the room they held
                for _ in self._held:
                    self._room.release()
                self._held.clear()

    def _write(self, record: dict, on_written: Callable[[], None]) -> None:
        try:
            self._out.write(record)
        except OutputFailed as e:
            self.failure = e
            raise
        self.written += 1
        on_written()
