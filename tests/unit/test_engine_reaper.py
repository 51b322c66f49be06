"""cluster/engine_reaper.py on real processes titled like vLLM's engine processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from cluster.engine_reaper import engine_processes, reap

TITLED = ("import setproctitle, time; setproctitle.setproctitle({title!r}); time.sleep(60)")


def _spawn(title: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TITLED.format(title=title)])


def _find_engines(*spawned: subprocess.Popen, within_s: float = 20.0) -> list:
    """Engine processes under this one among `spawned`, once a child has set its title (the
    session's Ray, when up, runs real engines under this process too)."""
    pids = {p.pid for p in spawned}
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if found := [p for p in engine_processes(os.getpid()) if p.pid in pids]:
            return found
        time.sleep(0.2)
    return []


def test_finds_only_engine_titles_and_kills_survivors():
    engine, other = _spawn("VLLM::EngineCore"), _spawn("ray::IDLE")
    try:
        found = _find_engines(engine, other)
        assert [p.pid for p in found] == [engine.pid]
        assert reap(found, grace_s=0.5) == [engine.pid]
        assert engine.wait(5) != 0
        assert other.poll() is None
    finally:
        for p in (engine, other):
            p.kill()
            p.wait()


def test_reap_leaves_exited_processes_alone():
    engine = _spawn("VLLM::Worker")
    found = _find_engines(engine)
    assert [p.pid for p in found] == [engine.pid]
    engine.terminate()
    engine.wait()
    assert reap(found, grace_s=2.0) == []
