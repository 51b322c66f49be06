"""What a re-run may keep of an output file: a row is done only if its line answers *this* input
line under *this* config.

Every output line records two fingerprints (cluster/batch/records.py): the input line's
(`BatchRow.fingerprint`, a hash of its canonical JSON) and the config's (`config_fingerprint`: what
shapes an answer: the model as configured and its `config.json` / `generation_config.json`, the
speculator, each pool's `engine_kwargs`, `server.max_n`). On a re-run, `plan_resume` matches each
line to the input row with its key (custom_id; line number for malformed and duplicate lines):

- both fingerprints equal: the row is done, skipped;
- a line that carries no answer (an `error` line or a 4xx refusal) and no longer matches (the row
  was fixed, the line became valid JSON, the config changed, the row is gone): superseded, removed
  before the run, and the row runs again;
- a 2xx answer whose row or config changed, or whose custom_id is not in the input, or that carries
  no fingerprint: `changed`. The driver refuses to run (naming the custom_ids) unless
  `--replace-changed`, which removes those lines before the run and answers the rows again.

So one output file only ever holds the answers of one input under one config.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from cluster.batch.records import OutputRecord, row_key
from cluster.batch.rows import BatchRow, RowError
from core import SpecserveConfig, resolve_path

_MODEL_FILES = ("config.json", "generation_config.json")  # sampling defaults live in the latter
_NAMED = 5  # custom_ids named in a refusal


def config_fingerprint(cfg: SpecserveConfig) -> str:
    """First 16 hex digits of the SHA-256 of what in `cfg` shapes an answer (module docstring).

    Pool sizes, routing and autoscaling are left out: greedy output is the same on either path,
    and a re-run on a resized cluster must still resume. Model weights are not hashed (too large
    to read per run); their folder's configs are.
    """
    pools = cfg.pools()
    shaping = {
        "model": cfg.model.model_dump(mode="json"),
        "model_files": {name: _read_text(Path(resolve_path(cfg.model.path)) / name)
                        for name in _MODEL_FILES},
        "speculator": (cfg.speculative.speculator.model_dump(mode="json")
                       if "speculative" in pools else None),
        "engine_kwargs": {pool: getattr(cfg, pool).engine_kwargs for pool in pools},
        "max_n": cfg.server.max_n,
    }
    text = json.dumps(shaping, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(slots=True)
class ResumePlan:
    """What to keep, remove and run.

    Attributes:
        done: keys (`row_key`) of rows whose line is current: skipped.
        remove: output line indexes to remove before the run (superseded lines, and the changed
            answers when replacing).
        superseded: lines without an answer that no longer match the input.
        changed: custom_ids of answers that no longer match (row or config changed, row gone,
            no fingerprint), in file order.
    """

    done: set[str | int] = field(default_factory=set)
    remove: set[int] = field(default_factory=set)
    superseded: int = 0
    changed: list[str] = field(default_factory=list)

    def has(self, row: BatchRow | RowError) -> bool:
        """Whether the input row already has its current line."""
        return row_key(row) in self.done

    def refusal(self, input_path: str, output_path: str) -> str:
        """The message refusing a run over changed answers, naming the first custom_ids."""
        named = ", ".join(repr(c) for c in self.changed[:_NAMED])
        more = len(self.changed) - _NAMED
        return (f"--output {output_path}: {len(self.changed)} answered rows no longer match "
                f"--input {input_path} or the config (custom_id {named}"
                + (f" and {more} more" if more > 0 else "") + "): their input line or the "
                "config changed since they were written, their custom_id is not in this input, "
                "or they carry no fingerprint. Nothing was run or changed. Choose another "
                "--output, or pass --replace-changed to answer those rows again (their old "
                "lines are removed first)")


def plan_resume(records: Iterable[OutputRecord], rows: Iterable[BatchRow | RowError],
                config_fp: str, replace_changed: bool = False) -> ResumePlan:
    """Matches the output's lines to the input rows (module docstring).

    Args:
        records: the output's lines (`OutputFile.existing.records`).
        rows: every input row (`read_rows`), read once here.
        config_fp: `config_fingerprint` of this run's config.
        replace_changed: changed answers are removed (and re-run) instead of blocking the run.
    """
    current = {row_key(row): row.fingerprint for row in rows}
    plan = ResumePlan()
    for rec in records:
        fp = current.get(rec.key)
        if fp is not None and rec.row_fingerprint == fp and rec.config_fingerprint == config_fp:
            plan.done.add(rec.key)
        elif rec.answered:
            plan.changed.append(str(rec.key))
            if replace_changed:
                plan.remove.add(rec.index)
        else:
            plan.superseded += 1
            plan.remove.add(rec.index)
    return plan


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
