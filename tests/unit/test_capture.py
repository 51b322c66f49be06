"""Capture (issue 32, part 1): the store's bounds and atomic files (core/capture_store.py), the
replica's recorder and engine wrapper (deployments/capture.py) on a scripted engine with vLLM's
own output and sampling types, and the router's marks (router/capture.py)."""

import asyncio
import os
import random

import numpy as np
import pytest
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind, SamplingParams

from core import ConfigError, SpecserveConfig
from core.capture_config import CAPTURE_KEY, TASK_KEY, CaptureConfig
from core.capture_store import CaptureStore, read_capture
from deployments.capture import CaptureRecorder, install_capture
from router.capture import CaptureMarks


def row(i: int, out: int = 3) -> dict:
    return {"time": 1.0 * i, "pool": "speculative", "task": "code", "temperature": 0.0,
            "prompt_token_ids": [i, i + 1], "output_token_ids": list(range(out)),
            "finish_reason": "length"}


def parts(root) -> list[str]:
    return sorted(os.listdir(root))


def test_store_writes_whole_files_and_reads_them_back(tmp_path):
    store = CaptureStore(CaptureConfig(uri=str(tmp_path / "cap")), writer="ab12")
    assert store.write([row(1), row(2)]) == (2, 0)
    assert store.write([row(3)]) == (1, 0)
    names = parts(tmp_path / "cap")
    assert len(names) == 2 and all(n.startswith("part-") and n.endswith("r.parquet")
                                   for n in names)  # no .tmp- file left behind
    table = read_capture(str(tmp_path / "cap"))
    assert table.column("prompt_token_ids").to_pylist() == [[1, 2], [2, 3], [3, 4]]
    assert table.column("output_token_ids").to_pylist()[0] == [0, 1, 2]


def test_read_of_an_absent_store_is_empty(tmp_path):
    assert read_capture(str(tmp_path / "none")).num_rows == 0


def test_store_keeps_max_rows_over_every_writer(tmp_path):
    cfg = CaptureConfig(uri=str(tmp_path), max_rows=5)
    a, b = CaptureStore(cfg, writer="aa"), CaptureStore(cfg, writer="bb")
    assert a.write([row(i) for i in range(3)]) == (3, 0)
    assert b.write([row(i) for i in range(4)]) == (2, 2)  # 3 held by the other writer
    assert a.write([row(9)]) == (0, 1)
    assert read_capture(str(tmp_path)).num_rows == 5


def test_store_stops_at_max_bytes(tmp_path):
    store = CaptureStore(CaptureConfig(uri=str(tmp_path), max_bytes=1 << 16))
    rng = random.Random(0)
    big = [{**row(i), "output_token_ids": [rng.randrange(1 << 30) for _ in range(4000)]}
           for i in range(8)]  # ~128 KB of incompressible int32 token ids, one file
    assert store.write(big) == (8, 0)
    assert store.write([row(1)]) == (0, 1)


def test_store_deletes_files_past_retention(tmp_path):
    now = [1000.0]
    store = CaptureStore(CaptureConfig(uri=str(tmp_path), retention_s=60), clock=lambda: now[0])
    store.write([row(1)])
    now[0] += 61
    store.write([row(2)])
    assert read_capture(str(tmp_path)).column("time").to_pylist() == [2.0]


def test_unwritable_store_raises_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(Exception):
        CaptureStore(CaptureConfig(uri=str(blocker / "cap"))).write([row(1)])
    assert blocker.read_text() == "not a folder"


def test_config_refuses_an_unknown_scheme_naming_the_field():
    data = SpecserveConfig.from_yaml("cluster/default.yaml").model_dump(mode="json")
    with pytest.raises(ConfigError, match=r"capture\.uri: scheme 'ftp'"):
        SpecserveConfig.from_dict({**data, "capture": {"enabled": True, "uri": "ftp://h/x"}})
    assert SpecserveConfig.from_dict(data).capture.enabled is False  # off by default


class FailingStore:
    def write(self, rows):
        raise OSError("disk full")


def test_recorder_counts_rows_a_failing_store_drops():
    async def run():
        rec = CaptureRecorder(CaptureConfig(enabled=True), "vanilla", store=FailingStore())
        rec.record("code", 0.0, [1], {0: ([2, 3], "length"), 1: ([4], "stop")}, 1e-6)
        await rec.flush()
        return rec
    rec = asyncio.run(run())
    assert rec.counts["dropped_error"] == 2 and rec.counts["written"] == 0
    assert rec.added_p99_s() > 0


def test_recorder_drops_past_its_backlog_bound(tmp_path):
    async def run():
        rec = CaptureRecorder(CaptureConfig(enabled=True, uri=str(tmp_path), max_buffered_rows=2,
                                            flush_rows=100), "vanilla")
        for i in range(5):
            rec.record("chat", 0.7, [i], {0: ([i], "stop")})
        await rec.close()
        return rec
    rec = asyncio.run(run())
    assert rec.counts["written"] == 2 and rec.counts["dropped_backlog"] == 3
    rows = read_capture(str(tmp_path)).to_pylist()
    assert [r["prompt_token_ids"] for r in rows] == [[0], [1]]
    assert rows[0]["task"] == "chat" and rows[0]["temperature"] == pytest.approx(0.7)


class ScriptedEngine:
    """`generate` yields the scripted RequestOutputs; records whether it was closed early."""

    def __init__(self, outputs):
        self.outputs = outputs
        self.closed = False

    async def generate(self, prompt, sampling_params, request_id, **kwargs):
        try:
            for out in self.outputs:
                yield out
                await asyncio.sleep(0)
        finally:
            self.closed = True


def output(ids, finished, finish=None, prompt=(5, 6, 7)):
    return RequestOutput("r", None, list(prompt), None,
                         [CompletionOutput(0, "", ids, None, None, finish_reason=finish)], finished)


def params(kind, marked=True):
    p = SamplingParams(temperature=0.0, max_tokens=8, output_kind=kind)
    if marked:
        p.extra_args = {CAPTURE_KEY: 1, TASK_KEY: "math"}
    return p


def drive(engine, sampling_params, take=None):
    rec = CaptureRecorder(CaptureConfig(enabled=True), "speculative", store=FailingStore())
    install_capture(engine, rec)

    async def run():
        gen = engine.generate("p", sampling_params, "r")
        got = []
        async for out in gen:
            got.append(out)
            if take is not None and len(got) == take:
                await gen.aclose()
                break
        return got
    return rec, asyncio.run(run())


def _plain(rows: list[dict]) -> list[dict]:
    """Queued rows with their token id arrays (int32, as queued) as lists."""
    for r in rows:
        for name in ("prompt_token_ids", "output_token_ids"):
            assert r[name].dtype == np.int32
    return [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in r.items()}
            for r in rows]


def test_stream_deltas_are_joined_into_one_row():
    outs = [output([1, 2], False), output([3], False), output([4, 5], True, "length")]
    rec, got = drive(ScriptedEngine(outs), params(RequestOutputKind.DELTA))
    assert got == outs  # passed through unchanged
    assert _plain(rec._rows) == [{"time": rec._rows[0]["time"], "pool": "speculative", "task": "math",
                                  "temperature": 0.0, "prompt_token_ids": [5, 6, 7],
                                  "output_token_ids": [1, 2, 3, 4, 5],
                                  "finish_reason": "length"}]


def test_final_only_output_is_recorded_once():
    rec, _ = drive(ScriptedEngine([output([1, 2, 3], True, "stop")]),
                   params(RequestOutputKind.FINAL_ONLY))
    assert [r["output_token_ids"] for r in _plain(rec._rows)] == [[1, 2, 3]]


def test_unmarked_requests_are_not_recorded():
    rec, got = drive(ScriptedEngine([output([1], True, "stop")]),
                     params(RequestOutputKind.DELTA, marked=False))
    assert len(got) == 1 and rec._rows == []


def test_an_abandoned_stream_closes_the_engine_generator_and_records_nothing():
    engine = ScriptedEngine([output([1], False), output([2], False), output([3], True, "length")])
    rec, got = drive(engine, params(RequestOutputKind.DELTA), take=1)
    assert len(got) == 1 and engine.closed  # vLLM aborts the request when its generator closes
    assert rec._rows == []


class Body:
    vllm_xargs = None


def test_marks_drop_client_keys_and_respect_excluded_keys(monkeypatch):
    monkeypatch.setenv("NO_CAPTURE", "k-private")
    marks = CaptureMarks(CaptureConfig(enabled=True, excluded_api_keys_env="NO_CAPTURE"))
    body = Body()
    body.vllm_xargs = {CAPTURE_KEY: 1, "specserve_task": "x", "session_id": "s"}
    marks.mark(body, "Bearer k-private", "code")
    assert body.vllm_xargs == {"session_id": "s"}  # excluded key: the client's mark dropped too
    marks.mark(body, "Bearer k-other", "code")
    assert body.vllm_xargs == {"session_id": "s", CAPTURE_KEY: 1, TASK_KEY: "code"}
    off = Body()
    off.vllm_xargs = {CAPTURE_KEY: 1}
    CaptureMarks(CaptureConfig()).mark(off, None, "code")
    assert off.vllm_xargs is None


def test_marks_fail_closed_when_the_excluded_keys_are_missing(monkeypatch):
    monkeypatch.delenv("NO_CAPTURE", raising=False)
    marks = CaptureMarks(CaptureConfig(enabled=True, excluded_api_keys_env="NO_CAPTURE"))
    assert not marks.allows("Bearer anything") and not marks.allows(None)


def test_rows_table_matches_pyarrows_own_conversion():
    import pyarrow as pa

    from core.capture_store import CAPTURE_SCHEMA, rows_table

    rng = random.Random(0)
    rows = [{"time": 1.5 * i, "pool": "vanilla", "task": "code", "temperature": 0.7,
             "prompt_token_ids": [rng.randrange(32000) for _ in range(rng.randrange(0, 9))],
             "output_token_ids": [rng.randrange(32000) for _ in range(rng.randrange(0, 5))],
             "finish_reason": rng.choice(["stop", "length", None])} for i in range(40)]
    expected = pa.Table.from_pylist(rows, schema=CAPTURE_SCHEMA)
    assert rows_table(rows).equals(expected)
    arrays = [{**r, "prompt_token_ids": np.asarray(r["prompt_token_ids"], dtype=np.int32),
               "output_token_ids": np.asarray(r["output_token_ids"], dtype=np.int32)}
              for r in rows]
    assert rows_table(arrays).equals(expected)
    assert rows_table([]).num_rows == 0
