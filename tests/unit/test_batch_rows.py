"""Batch input rows: OpenAI Batch API lines parsed and validated (cluster/batch/rows.py)."""

from __future__ import annotations

import json

import pytest

from cluster.batch.rows import BatchRow, Endpoint, RowError, count_lines, parse_row, read_rows

MODEL = "specserve-tiny"


def line(custom_id="r1", url="/v1/completions", method="POST", **body) -> str:
    return json.dumps({"custom_id": custom_id, "method": method, "url": url,
                       "body": {"model": MODEL, "prompt": "def parse(", **body}})


def test_completion_and_chat_rows_parse():
    row = parse_row(1, line(max_tokens=8, route="vanilla"), MODEL)
    assert isinstance(row, BatchRow) and row.endpoint is Endpoint.COMPLETIONS
    assert (row.line, row.custom_id, row.body.max_tokens) == (1, "r1", 8)
    assert row.body.model_extra == {"route": "vanilla"}  # the router reads and pops it
    chat = json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}})
    assert parse_row(2, chat, MODEL).endpoint is Endpoint.CHAT


def test_method_defaults_to_post():
    text = json.dumps({"custom_id": "a", "url": "/v1/completions",
                       "body": {"model": MODEL, "prompt": "x"}})
    assert isinstance(parse_row(1, text, MODEL), BatchRow)


@pytest.mark.parametrize("text, code, custom_id, words", [
    ("{not json", "invalid_json", None, "not JSON"),
    ("[1, 2]", "invalid_json", None, "JSON object"),
    (json.dumps({"url": "/v1/completions", "body": {}}), "invalid_custom_id", None, "custom_id"),
    (json.dumps({"custom_id": 7, "url": "/v1/completions", "body": {}}), "invalid_custom_id",
     None, "custom_id"),
    (line(method="GET"), "invalid_method", "r1", "method"),
    (line(url="/v1/embeddings"), "invalid_url", "r1", "url"),
    (json.dumps({"custom_id": "r1", "url": "/v1/completions", "body": "x"}), "invalid_body",
     "r1", "body"),
    (line(max_tokens="many"), "invalid_body", "r1", "body.max_tokens"),
    (line(prompt=""), "invalid_body", "r1", "body.prompt"),
    (line(stream=True), "invalid_body", "r1", "body.stream"),
    (line(model="gpt-4"), "model_not_found", "r1", "body.model"),
])
def test_invalid_lines_name_line_and_field(text, code, custom_id, words):
    err = parse_row(17, text, MODEL)
    assert isinstance(err, RowError)
    assert (err.line, err.code, err.custom_id) == (17, code, custom_id)
    assert err.message.startswith("line 17: ") and words in err.message


def test_read_rows_numbers_lines_skips_blanks_and_reports_duplicates(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([line("a"), "", line("b"), "{oops", line("a"), line("c")]) + "\n")
    rows = list(read_rows(path, MODEL))
    assert [(r.line, type(r).__name__) for r in rows] == [
        (1, "BatchRow"), (3, "BatchRow"), (4, "RowError"), (5, "RowError"), (6, "BatchRow")]
    dup = rows[3]
    assert dup.code == "duplicate_custom_id" and dup.custom_id == "a" and dup.line_keyed
    assert "repeats line 1" in dup.message
    assert count_lines(path) == 5


def test_a_refused_row_still_owns_its_custom_id(tmp_path):
    """An invalid body keeps its custom_id: a later valid line with it is a duplicate."""
    path = tmp_path / "in.jsonl"
    path.write_text(line("a", max_tokens="x") + "\n" + line("a") + "\n")
    first, second = read_rows(path, MODEL)
    assert (first.code, first.line_keyed) == ("invalid_body", False)
    assert second.code == "duplicate_custom_id"


def test_the_fingerprint_follows_values_not_formatting():
    base = parse_row(1, line(max_tokens=8), MODEL)
    spaced = parse_row(9, json.dumps(json.loads(line(max_tokens=8)), indent=2).replace("\n", " "),
                       MODEL)
    reordered = json.loads(line(max_tokens=8))
    reordered = parse_row(1, json.dumps(dict(reversed(list(reordered.items())))), MODEL)
    assert base.fingerprint == spaced.fingerprint == reordered.fingerprint
    assert len(base.fingerprint) == 16
    assert parse_row(1, line(max_tokens=9), MODEL).fingerprint != base.fingerprint
    bad, fixed = parse_row(4, "{oops", MODEL), parse_row(4, line(), MODEL)
    assert bad.fingerprint != fixed.fingerprint != base.fingerprint
    assert parse_row(4, "{oops  ", MODEL).fingerprint == bad.fingerprint  # the stripped text
