"""The `capture:` block: opt-in recording of served requests for retraining the speculator.

Both pools record each captured request's prompt and output token ids, task type and temperature
(deployments/capture.py) as Parquet under `uri`; `specserve speculator retrain` reads them back.
Off by default. Bounds are per store (all replicas together): past `max_rows` or `max_bytes` new
rows are dropped and counted (`specserve_capture_rows_total{outcome="dropped_full"}`), never the
request; files older than `retention_s` are deleted at the next write.

Example:
    >>> CaptureConfig(enabled=True, uri="/data/capture").scheme()
    'file'
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from core.types import Strict

# `vllm_xargs` keys (vLLM: `SamplingParams.extra_args`) the router sets on the requests it lets be
# captured, read by the pool's engine wrapper (deployments/capture.py); a client's own `specserve_*`
# keys are dropped by the router, so no client can mark its request.
CAPTURE_KEY = "specserve_capture"
TASK_KEY = "specserve_task"
XARGS_PREFIX = "specserve_"

# Schemes `pyarrow.fs.FileSystem.from_uri` opens (pyarrow 26: local, S3, GCS, HDFS, Azure).
URI_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class CaptureConfig(Strict):
    """Capture of served traffic (issue 32): what is recorded, where, and how much."""

    enabled: bool = Field(False, description="Record served requests (opt-in). Off: nothing is "
                          "recorded and no request carries capture marks.")
    uri: str = Field("~/.cache/specserve/capture", min_length=1, description="Where the Parquet "
                     "files go: a local path (`~`, `$VAR` and `${models}` expand) or any URI "
                     "`pyarrow.fs` opens (s3://, gs://, hdfs://, abfs://); on a cluster a PVC "
                     "mount or an object store every replica can write.")
    max_rows: int = Field(100_000, ge=1, description="Rows the store may hold (all replicas "
                          "together); rows past it are dropped and counted.")
    max_bytes: int = Field(1 << 30, ge=1 << 16, description="Bytes the store may hold; once it "
                           "holds this much, rows are dropped and counted.")
    retention_s: float = Field(7 * 86400.0, gt=0, description="Files older than this (seconds, "
                               "from the time in their name) are deleted at the next write.")
    flush_rows: int = Field(256, ge=1, description="A replica writes a file once it holds this "
                            "many rows, or every flush_interval_s.")
    flush_interval_s: float = Field(10.0, gt=0, description="Longest a captured row waits in a "
                                    "replica's memory before it is written (seconds).")
    max_buffered_rows: int = Field(4096, ge=1, description="Rows a replica holds in memory while "
                                   "the store is slow; past it rows are dropped and counted "
                                   "(outcome `dropped_backlog`), never the request.")
    excluded_api_keys_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Name of an environment variable "
        "holding API keys (comma-separated) whose requests are never captured, checked in the "
        "router in constant time like server.api_keys_env.")

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        m = _SCHEME.match(uri)
        if m and m.group(1).lower() not in URI_SCHEMES:
            raise ValueError(f"scheme {m.group(1)!r} is not one pyarrow.fs opens; use a local "
                             f"path or one of {', '.join(s + '://' for s in URI_SCHEMES)}")
        return uri

    def scheme(self) -> str:
        """The URI's scheme, `file` for a local path."""
        m = _SCHEME.match(self.uri)
        return m.group(1).lower() if m else "file"


class RetrainLoopConfig(Strict):
    """When `specserve speculator loop` runs capture -> retrain -> rollout (issue 32, part 5).

    Triggers: `manual` (only `--once`), `drift` (the serving speculator's live mean acceptance
    length on some task fell: over the last `drift_window_s`, E[τ] − 1 below `drift_ratio` x its
    value over `baseline_window_s`; the rule of the `SpecserveAcceptanceDrift` alert,
    cluster/observability/alerts.py, on the router's per-speculator tallies), `schedule` (every
    `schedule_s`). A triggered loop retrains only with `min_captured_rows` in the capture store.
    """

    trigger: Literal["manual", "drift", "schedule"] = Field("manual", description="What starts "
                                                            "a retrain: manual, drift, schedule.")
    drift_ratio: float = Field(0.7, gt=0, lt=1, description="Drift when E[τ] − 1 over "
                               "drift_window_s falls below this fraction of its baseline.")
    drift_window_s: float = Field(1800.0, gt=0, description="Recent window of the drift rule "
                                  "(seconds).")
    baseline_window_s: float = Field(21600.0, gt=0, description="Baseline window of the drift "
                                     "rule (seconds); longer than drift_window_s.")
    drift_min_steps: int = Field(200, ge=1, description="Verification steps a task needs in each "
                                 "window for the drift rule to judge it.")
    schedule_s: float = Field(86400.0, gt=0, description="Period of the `schedule` trigger "
                              "(seconds).")
    min_captured_rows: int = Field(500, ge=1, description="Rows the capture store must hold "
                                   "before a triggered retrain runs.")
    poll_s: float = Field(60.0, gt=0, description="How often the loop reads the router's "
                          "tallies (seconds).")
    retrain_steps: int = Field(200, ge=1, description="Training steps of each retrain "
                               "(`specserve speculator retrain --steps`).")
    heads_dir: str | None = Field(None, min_length=1, description="Folder the versioned "
                                  "candidate heads are written to (`~`, `$VAR`, `${models}` "
                                  "expand); default: beside the serving head. On a cluster a "
                                  "path every speculative replica reads.")

    @model_validator(mode="after")
    def _windows(self) -> "RetrainLoopConfig":
        if self.baseline_window_s <= self.drift_window_s:
            raise ValueError("baseline_window_s: must be longer than drift_window_s "
                             f"({self.baseline_window_s:g} <= {self.drift_window_s:g})")
        return self
