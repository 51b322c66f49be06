"""What a re-run keeps of an output file (cluster/batch/resume.py): a line counts as done only if
it answers this input line under this config."""

from __future__ import annotations

import json

import pytest

from cluster.batch.output import OutputFile
from cluster.batch.records import error_record, response_record
from cluster.batch.resume import config_fingerprint, plan_resume
from cluster.batch.rows import read_rows
from core import DEFAULT_CONFIG_PATH, SpecserveConfig

MODEL = "specserve-tiny"
CFG = "c0ffee"


def request(custom_id: str, **body) -> str:
    return json.dumps({"custom_id": custom_id, "url": "/v1/completions",
                       "body": {"model": MODEL, "prompt": "def f(", **body}})


def write_input(path, lines: list[str]):
    path.write_text("\n".join(lines) + "\n")
    return list(read_rows(path, MODEL))


def run_into(out_path, rows, cfg: str = CFG) -> None:
    """Writes the line a run would write for each row (answers: 200; error rows as such)."""
    out = OutputFile(out_path)
    for row in rows:
        if hasattr(row, "body"):
            out.write(response_record(row, 200, {"id": row.custom_id}, {}, cfg))
        else:
            out.write(error_record(row, cfg))
    out.close()


def plan(out_path, rows, cfg: str = CFG, replace: bool = False):
    out = OutputFile(out_path)
    p = plan_resume(out.existing.records, rows, cfg, replace)
    out.close()
    return p


def test_the_same_input_and_config_resume_every_row(tmp_path):
    rows = write_input(tmp_path / "in.jsonl", [request(f"row-{i}") for i in range(3)] + ["{x"])
    run_into(tmp_path / "out.jsonl", rows)
    p = plan(tmp_path / "out.jsonl", rows)
    assert all(p.has(r) for r in rows) and not p.remove and not p.changed


def test_another_input_with_the_same_ids_is_changed_not_done(tmp_path):
    in1 = write_input(tmp_path / "in1.jsonl", [request(f"row-{i}", max_tokens=8) for i in range(3)])
    in2 = write_input(tmp_path / "in2.jsonl", [request(f"row-{i}", max_tokens=9) for i in range(3)])
    run_into(tmp_path / "out.jsonl", in1)
    p = plan(tmp_path / "out.jsonl", in2)
    assert p.changed == ["row-0", "row-1", "row-2"] and not any(p.has(r) for r in in2)
    assert not p.remove  # refused: nothing removed
    message = p.refusal("in2.jsonl", "out.jsonl")
    assert "3 answered rows" in message and "'row-0'" in message and "--replace-changed" in message
    replaced = plan(tmp_path / "out.jsonl", in2, replace=True)
    assert replaced.remove == {0, 1, 2} and replaced.changed == p.changed


def test_one_edited_row_is_the_only_change(tmp_path):
    lines = [request(f"row-{i}") for i in range(4)]
    run_into(tmp_path / "out.jsonl", write_input(tmp_path / "in.jsonl", lines))
    lines[2] = request("row-2", temperature=0.5)
    rows = write_input(tmp_path / "in.jsonl", lines)
    p = plan(tmp_path / "out.jsonl", rows)
    assert p.changed == ["row-2"] and [p.has(r) for r in rows] == [True, True, False, True]


def test_a_config_change_changes_every_answer(tmp_path):
    rows = write_input(tmp_path / "in.jsonl", [request("a"), request("b")])
    run_into(tmp_path / "out.jsonl", rows)
    assert plan(tmp_path / "out.jsonl", rows, cfg="other").changed == ["a", "b"]


def test_answers_to_ids_not_in_the_input_and_lines_without_fingerprint_are_changed(tmp_path):
    run_into(tmp_path / "out.jsonl", write_input(tmp_path / "in1.jsonl", [request("a")]))
    with open(tmp_path / "out.jsonl", "a") as f:  # written by a specserve without fingerprints
        f.write(json.dumps({"id": "batch_req_2", "custom_id": "b", "error": None,
                            "response": {"status_code": 200, "body": {}}}) + "\n")
    rows = write_input(tmp_path / "in2.jsonl", [request("b"), request("c")])
    assert plan(tmp_path / "out.jsonl", rows).changed == ["a", "b"]


def test_error_lines_that_no_longer_match_are_superseded(tmp_path):
    lines = ["{not json", request("b", max_tokens="many"), request("c")]
    run_into(tmp_path / "out.jsonl", write_input(tmp_path / "in.jsonl", lines))
    lines[0], lines[1] = request("a"), request("b", max_tokens=4)  # both fixed
    rows = write_input(tmp_path / "in.jsonl", lines)
    p = plan(tmp_path / "out.jsonl", rows)
    assert (p.superseded, p.remove, p.changed) == (2, {0, 1}, [])
    assert [p.has(r) for r in rows] == [False, False, True]


def test_a_refused_answer_is_superseded_when_its_row_changes(tmp_path):
    rows = write_input(tmp_path / "in.jsonl", [request("a", n=100)])
    out = OutputFile(tmp_path / "out.jsonl")
    out.write(response_record(rows[0], 400, {"error": {"code": 400, "param": "n"}}, {}, CFG))
    out.close()
    p = plan(tmp_path / "out.jsonl", write_input(tmp_path / "in.jsonl", [request("a", n=2)]))
    assert (p.superseded, p.remove, p.changed) == (1, {0}, [])


def test_config_fingerprint_follows_what_shapes_answers():
    base = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    data = base.model_dump(mode="json")

    def fp(**changes) -> str:
        d = json.loads(json.dumps(data))
        for dotted, value in changes.items():
            *parents, leaf = dotted.split("__")
            node = d
            for key in parents:
                node = node[key]
            node[leaf] = value
        return config_fingerprint(SpecserveConfig.from_dict(d))

    same = fp()
    assert same == config_fingerprint(base) and len(same) == 16
    for shaping in ({"model__max_model_len": 512},
                    {"speculative__speculator__method": "draft_model",
                     "speculative__speculator__model": "${models}/draft"},
                    {"vanilla__engine_kwargs": {"seed": 1}}, {"server__max_n": 2}):
        assert fp(**shaping) != same, shaping
    for not_shaping in ({"router__pin": "vanilla"}, {"vanilla__max_num_seqs": 8},
                        {"server__port": 9000}):
        assert fp(**not_shaping) == same, not_shaping


@pytest.mark.parametrize("replace", [False, True])
def test_matching_lines_are_never_removed(tmp_path, replace):
    rows = write_input(tmp_path / "in.jsonl", [request("a"), "{x", request("c")])
    run_into(tmp_path / "out.jsonl", rows)
    p = plan(tmp_path / "out.jsonl", rows, replace=replace)
    assert not p.remove and p.done == {"a", 2, "c"}
