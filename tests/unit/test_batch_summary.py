"""Batch run statistics and their reporters (cluster/batch/summary.py)."""

from __future__ import annotations

import json

from cluster.batch.summary import BatchStats, progress_line, summary_text


def body(completion_tokens: int, spec: dict | None = None) -> dict:
    return {"usage": {"prompt_tokens": 5, "completion_tokens": completion_tokens},
            "metrics": {"speculative_decoding": spec} if spec else None}


SPEC = {"num_spec_steps": 10, "num_draft_tokens": 40, "num_accepted_draft_tokens": 30}


def stats() -> BatchStats:
    s = BatchStats(total=6, skipped=1)
    s.observe_response(200, body(20, SPEC), "speculative", "speculation_pays", "code")
    s.observe_response(200, body(10), "vanilla", "speculation_costs", "chat")
    s.observe_response(400, {"error": {"code": 400}}, "vanilla", "speculation_costs", "code")
    s.observe_response(400, {"error": {"code": 400}})  # refused by the router itself: no route
    s.observe_error()
    return s


def test_counts_rows_tokens_routes_and_acceptance_per_task():
    d = stats().to_dict()
    assert d["rows"] == {"total": 6, "ok": 2, "failed": 3, "skipped": 1, "unfinished": 0}
    assert d["tokens"] == {"prompt": 10, "completion": 30}
    assert d["routes"] == {"speculative": 1, "vanilla": 2}
    assert d["routes_by_task"] == {"chat": {"vanilla": 1}, "code": {"speculative": 1, "vanilla": 1}}
    assert d["acceptance_by_task"] == {"code": {
        "rows": 1, "draft_tokens": 40, "accepted_tokens": 30, "acceptance_rate": 0.75,
        "mean_acceptance_length": 4.0}}
    assert d["wall_s"] >= 0 and d["completion_tok_per_s"] >= 0


def test_progress_line_and_summary_text():
    s = stats()
    line = progress_line(s, {"speculative": 3, "vanilla": 1})
    assert "6/6 rows (ok 2, failed 3, skipped 1)" in line
    assert "in flight speculative 3 vanilla 1" in line and "speculative 33%" in line
    text = summary_text(s.to_dict())
    assert text.splitlines()[0].startswith("rows: 2 ok, 3 failed, 1 skipped")
    assert "code: speculative 1, vanilla 1; acceptance 0.75, mean acceptance length 4.0" in text
    last = text.splitlines()[-1]
    assert last.startswith("summary: ") and json.loads(last[9:])["rows"]["ok"] == 2
