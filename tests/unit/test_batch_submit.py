"""The job `specserve batch --submit` submits (cluster/batch/submit.py): its flags, paths
rewritten (pure). Waiting for a head that is not up, in real time:
tests/integration/test_batch_submit_live.py."""

from __future__ import annotations

import argparse

from cluster.batch import add_arguments
from cluster.batch.submit import REPO_ROOT, job_argv


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(argv)


def test_job_flags_drop_submit_and_rewrite_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--submit", "http://h:8265", "--input", str(REPO_ROOT / "bench/prompts/x.jsonl"),
            "--output=out.jsonl", "--config", "/etc/c.yaml", "--no-follow", "--max-in-flight", "8"]
    assert job_argv(parse(argv), argv) == [
        "--input", "bench/prompts/x.jsonl",        # travels with the working dir
        "--output", str(tmp_path / "out.jsonl"),  # absolute: never into the working dir
        "--config", "/etc/c.yaml", "--max-in-flight", "8"]
