"""`specserve batch` refuses before anything runs: an output holding answers to another input, an
output that cannot be written. Through the real CLI (`python -m cluster.cli batch`), pointed at a
Ray address that does not answer (`--wait-s 0`), so a refusal that did not happen would end in
"not reachable" instead, without starting Ray here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from small_fs import tmpfs

from cluster import cli
from core import load_config
from cluster.batch.output import OutputFile
from cluster.batch.records import response_record
from cluster.batch.resume import config_fingerprint
from cluster.batch.rows import read_rows

REPO = Path(__file__).resolve().parents[2]
MODEL = "specserve-tiny"


def request(custom_id: str, prompt: str) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                       "body": {"model": MODEL, "prompt": prompt, "max_tokens": 8}})


def batch(*flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",
                                                             "SPECSERVE_CONFIG_JSON")}
    return subprocess.run([sys.executable, "-m", "cluster.cli", "batch", "--address",
                           "127.0.0.1:1", "--wait-s", "0", *flags], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def answered(inp: Path, out: Path) -> None:
    """The output a finished run of `inp` leaves: a 200 line per row, with its fingerprints."""
    fp = config_fingerprint(load_config(None))
    f = OutputFile(out)
    for row in read_rows(inp, MODEL):
        f.write(response_record(row, 200, {"id": f"cmpl-{row.custom_id}"}, {}, fp))
    f.close()


def test_another_input_with_the_same_ids_is_refused_and_the_output_unchanged(tmp_path):
    in1, in2, out = tmp_path / "in1.jsonl", tmp_path / "in2.jsonl", tmp_path / "out.jsonl"
    in1.write_text("".join(request(f"row-{i}", f"def f{i}(") + "\n" for i in range(1, 4)))
    in2.write_text("".join(request(f"row-{i}", f"class C{i}:") + "\n" for i in range(1, 4)))
    answered(in1, out)
    before = out.read_bytes()
    proc = batch("--input", str(in2), "--output", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--output {out}: 3 answered rows no longer match --input {in2}" in proc.stdout
    assert "'row-1', 'row-2', 'row-3'" in proc.stdout and "--replace-changed" in proc.stdout
    assert "not reachable" not in proc.stdout and "Traceback" not in proc.stderr
    assert out.read_bytes() == before
    # the same input resumes: nothing refused, it goes on to the cluster (unreachable here: 1)
    proc = batch("--input", str(in1), "--output", str(out))
    assert proc.returncode == 1 and "3 rows already there" in proc.stdout
    assert "not reachable" in proc.stdout and out.read_bytes() == before


def test_an_output_in_a_missing_directory_is_refused_before_anything_runs(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(request("a", "x") + "\n")
    out = tmp_path / "no-such-dir" / "out.jsonl"
    proc = batch("--input", str(inp), "--output", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--output {out}: {out.parent}: cannot create files there (No such file or " \
           "directory" in proc.stdout and "nothing was run" in proc.stdout
    assert "Traceback" not in proc.stderr and "not reachable" not in proc.stdout


def test_an_output_on_a_read_only_or_full_filesystem_is_refused(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(request("a", "x") + "\n")
    with tmpfs(tmp_path / "ro", 64, read_only=True) as ro:
        proc = batch("--input", str(inp), "--output", str(ro / "out.jsonl"))
        assert proc.returncode == 2 and "Read-only file system" in proc.stdout, proc.stdout
        assert "nothing was run" in proc.stdout and "Traceback" not in proc.stderr
    with tmpfs(tmp_path / "full", 8) as full:
        (full / "filler").write_bytes(b"x" * 8192)
        proc = batch("--input", str(inp), "--output", str(full / "out.jsonl"))
        assert proc.returncode == 2 and "No space left on device" in proc.stdout, proc.stdout
        assert "Traceback" not in proc.stderr


def test_models_subcommands_show_their_own_flags_and_defaults(capsys):
    """`specserve models ACTION --help` is the lab entrypoint's own help, not the parent's."""
    for action, flag in (("build", "--target-steps"), ("heads", "--eagle3-steps"),
                         ("report", "--max-tokens")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["models", action, "--help"])
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert f"usage: specserve models {action}" in out and flag in out, out
        assert "(default: " in out, out
