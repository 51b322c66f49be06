"""Waiting for a head that is not up, in real time against a real closed port (~10 s each): the
submitter of `specserve batch --submit` (cluster/batch/submit.py) and a direct run's connect
(cluster/batch/app.py). The job's flags (pure): tests/unit/test_batch_submit.py."""

from __future__ import annotations

import argparse
import socket
import time

import pytest

from cluster.batch import add_arguments, log
from cluster.batch.app import ClusterUnavailable, wait_for_port
from cluster.batch.submit import submit


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(argv)


def test_submitter_waits_for_a_head_that_is_not_up_then_says_so(capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--submit", f"http://127.0.0.1:{port}", "--input", "in.jsonl", "--output", "o.jsonl",
            "--wait-s", "6"]
    t0 = time.monotonic()
    assert submit(parse(argv), argv) == 1
    out = capsys.readouterr().out
    assert time.monotonic() - t0 >= 5
    assert "is not up yet" in out and "retrying every 5 s" in out
    assert "did not answer within 6 s (--wait-s)" in out


def test_direct_run_waits_for_a_head_that_is_not_up_then_says_so(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(ClusterUnavailable, match=f"127.0.0.1:{port} not reachable after 6 s"):
        wait_for_port("127.0.0.1", port, 6, log)
    assert time.monotonic() - t0 >= 5
    assert "is not reachable yet" in capsys.readouterr().out
