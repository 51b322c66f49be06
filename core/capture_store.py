"""The capture store: served requests as Parquet files under one `pyarrow.fs` URI.

One row per completion choice (`CAPTURE_SCHEMA`): when it finished, which pool served it, the
router's task type, the temperature, the prompt's token ids (after the chat template) and the
output's token ids. Each write is one file, `part-<ms>-<writer>-<seq>-<rows>r.parquet`, written
under a `.tmp-` name and then moved into place, so a reader (`read_capture`, or any
`pyarrow.dataset` reader, which skips dot-files) never sees half a file; the time and row count in
the name let a writer keep the bounds without opening files.

Bounds (`CaptureConfig`): a write keeps the store within `max_rows` and `max_bytes` counted over
every writer's files (two writers racing may each take the last room: the bound can be passed by
one flush per writer) and deletes files older than `retention_s`.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from core.capture_config import CaptureConfig
from core.paths import resolve_path

CAPTURE_SCHEMA = pa.schema([
    ("time", pa.float64()),  # unix seconds when the request finished
    ("pool", pa.string()),  # "vanilla" | "speculative"
    ("task", pa.string()),  # the router's task type (router/classify.py)
    ("temperature", pa.float32()),
    ("prompt_token_ids", pa.list_(pa.int32())),
    ("output_token_ids", pa.list_(pa.int32())),
    ("finish_reason", pa.string()),  # "stop" | "length" | "abort" | ...
])
_PART = re.compile(r"^part-(\d+)-[0-9a-f]+-\d+-(\d+)r\.parquet$")


TOKEN_COLUMNS = ("prompt_token_ids", "output_token_ids")


def rows_table(rows: list[dict]) -> pa.Table:
    """`rows` as a `CAPTURE_SCHEMA` table. Token id columns may hold lists or int32 numpy arrays
    (what the pools queue, deployments/capture.py); arrays are joined with numpy, so the writer
    thread holds the GIL ~0.6 ms per 256 rows instead of `pa.Table.from_pylist`'s ~1.9 ms
    (medians of 30, this 2-core machine, 150 + 64 tokens a row): time the replica's event loop
    waits."""
    columns = {f.name: pa.array([r[f.name] for r in rows], type=f.type)
               for f in CAPTURE_SCHEMA if f.name not in TOKEN_COLUMNS}
    for name in TOKEN_COLUMNS:
        values = [np.asarray(r[name], dtype=np.int32) for r in rows]
        offsets = np.zeros(len(values) + 1, dtype=np.int32)
        np.cumsum([len(v) for v in values], out=offsets[1:])
        flat = np.concatenate(values) if values else np.empty(0, dtype=np.int32)
        columns[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
    return pa.table(columns, schema=CAPTURE_SCHEMA)


def open_store(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, root path) for a capture URI; a local path is expanded (`resolve_path`) and
    made absolute.

    Raises:
        pyarrow.ArrowInvalid / OSError: pyarrow cannot open the URI.
    """
    if "://" not in uri:
        uri = os.path.abspath(resolve_path(uri))
        return pafs.LocalFileSystem(), uri
    return pafs.FileSystem.from_uri(uri)


@dataclass(frozen=True, slots=True)
class StoreUsage:
    """What the store holds: rows and bytes of its part files, and the files past retention."""

    rows: int
    bytes: int
    expired: list[str]


class CaptureStore:
    """Writes batches of captured rows within the config's bounds.

    Args:
        cfg: the `capture:` block.
        writer: a short hex tag naming this writer in file names (default: random).
        clock: unix seconds (tests pass their own).
    """

    def __init__(self, cfg: CaptureConfig, writer: str | None = None, clock=time.time):
        self._cfg = cfg
        self._fs, self._root = open_store(cfg.uri)
        self._writer = writer or uuid.uuid4().hex[:8]
        self._seq = 0
        self._clock = clock
        self._dir_made = False

    def usage(self) -> StoreUsage:
        """Rows and bytes of the store's part files now, and those older than retention."""
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._root, allow_not_found=True))
        except FileNotFoundError:
            infos = []
        rows = size = 0
        expired = []
        oldest = (self._clock() - self._cfg.retention_s) * 1000
        for info in infos:
            m = _PART.match(info.base_name)
            if info.type != pafs.FileType.File or not m:
                continue
            if int(m.group(1)) < oldest:
                expired.append(info.path)
                continue
            rows += int(m.group(2))
            size += info.size or 0
        return StoreUsage(rows, size, expired)

    def write(self, rows: list[dict]) -> tuple[int, int]:
        """Writes what fits of `rows` (dicts of `CAPTURE_SCHEMA`'s fields) as one file after
        deleting expired files; returns (written, dropped for lack of room).

        Raises:
            OSError (and pyarrow errors): the store cannot be listed or written; nothing of this
            batch is in the store then (no half-written file under a part name).
        """
        if not rows:
            return 0, 0
        if not self._dir_made:
            self._fs.create_dir(self._root, recursive=True)
            self._dir_made = True
        usage = self.usage()
        for path in usage.expired:
            self._fs.delete_file(path)
        room = self._cfg.max_rows - usage.rows if usage.bytes < self._cfg.max_bytes else 0
        keep = rows[:max(room, 0)]
        if keep:
            self._seq += 1
            name = (f"part-{int(self._clock() * 1000):013d}-{self._writer}-{self._seq}-"
                    f"{len(keep)}r.parquet")
            tmp = f"{self._root}/.tmp-{name}"
            table = rows_table(keep)
            try:
                pq.write_table(table, tmp, filesystem=self._fs)
                self._fs.move(tmp, f"{self._root}/{name}")
            except BaseException:
                try:
                    self._fs.delete_file(tmp)
                except (OSError, FileNotFoundError):
                    pass
                raise
        return len(keep), len(rows) - len(keep)


def read_capture(uri: str) -> pa.Table:
    """Every captured row under `uri` (`CAPTURE_SCHEMA`), oldest file first; an empty table when
    the store holds none.

    Raises:
        OSError: the store cannot be read.
    """
    fs, root = open_store(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root))
    except FileNotFoundError:
        return CAPTURE_SCHEMA.empty_table()
    parts = sorted((i.path for i in infos if _PART.match(i.base_name)),
                   key=lambda p: int(_PART.match(p.rsplit("/", 1)[-1]).group(1)))
    if not parts:
        return CAPTURE_SCHEMA.empty_table()
    return ds.dataset(parts, schema=CAPTURE_SCHEMA, format="parquet", filesystem=fs).to_table()
