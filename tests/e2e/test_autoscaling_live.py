"""Autoscaling on a real local Ray with real CPU vLLM replicas (its own small app and cluster).

A ramp of streaming requests scales the vanilla pool from 1 to 2 replicas; when traffic stops
(the last requests were long streams, ../shared/cases #8) it returns to 1 within the downscale
delay; the second replica adopts the first one's startup profile (the same engine on the same
hardware, deployments/profile.py `profile_key`) instead of measuring its own. The policy is shown
to be invoked: its call count and decision events, with reasons, are
read from the application's StatsBoard (autoscaling/controller.py). The replica timeline is
printed (run with -s). Do not run next to tests/session_app.py's session app: it starts and stops
its own cluster (run it alone, under the heavy lock).
"""

from __future__ import annotations

import os
import threading
import time

import httpx
import pytest

from core import DEFAULT_CONFIG_PATH, SpecserveConfig
from deployments.cores import node_cores
from tests.local_ray import start_own_ray
from tests.prometheus import LocalPrometheus, missing, panel_queries, wait_sane

pytestmark = pytest.mark.own_ray

PORT = int(os.environ.get("SPECSERVE_TEST_PORT", "8123"))
APP = "specserve-autoscale"
UPSCALE_DELAY_S, DOWNSCALE_DELAY_S, LOOK_BACK_S = 2.0, 10.0, 2.0
STREAMS = 4  # concurrent streams: 4 in flight over 1 replica at target 2 wants 2


@pytest.fixture(scope="module")
def live(lab):
    """(base URL, app config) of a vanilla-only app autoscaled 1..2 on its own local Ray."""
    import ray
    from ray import serve

    from deployments.deploy import run_app

    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    data["vanilla"] |= {"enforce_eager": True, "profile_max_batch": 2, "max_num_seqs": 16,
                        "cpu_kvcache_space_gib": 1}
    data["speculative"]["num_replicas"] = 0  # one pool keeps this test within 2 cores
    data["server"]["port"] = PORT
    data["autoscaling"] = {
        "enabled": True, "budget_accelerators": 2,
        "vanilla": {"min_replicas": 1, "max_replicas": 2},
        "upscale_delay_s": UPSCALE_DELAY_S, "downscale_delay_s": DOWNSCALE_DELAY_S,
        "target_ongoing_requests": 2, "metrics_interval_s": 0.5, "look_back_period_s": LOOK_BACK_S}
    cfg = SpecserveConfig.from_dict(data)
    # handles and replicas push Serve's own request counts every second (default 10 s)
    os.environ["RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = "1"
    os.environ["RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = "1"
    start_own_ray(node_cores())
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": PORT})
        run_app(cfg, APP, timeout_s=300)
        yield f"http://127.0.0.1:{PORT}", cfg
    finally:
        serve.shutdown()
        ray.shutdown()


class Timeline:
    """Samples the vanilla pool's running replicas every `period_s` in a thread."""

    def __init__(self, period_s: float = 1.0):
        self.t0 = time.monotonic()
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._period_s = period_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def running(self) -> int:
        from ray import serve

        dep = serve.status().applications[APP].deployments["vanilla"]
        return dep.replica_states.get("RUNNING", 0)

    def _run(self) -> None:
        last = None
        while not self._stop.is_set():
            n = self.running()
            if n != last:
                self.samples.append((time.monotonic() - self.t0, n))
                last = n
            self._stop.wait(self._period_s)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def wait_for(self, replicas: int, timeout_s: float) -> float | None:
        """Seconds (since start) when the pool first ran `replicas`, or None on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.running() == replicas:
                return self.now()
            time.sleep(0.5)
        return None

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _stream_until(base: str, stop: threading.Event, done: list[float], errors: list[str],
                  clock: Timeline) -> None:
    """Sends long greedy streams back to back until `stop`; records when each ends."""
    body = {"model": "specserve-tiny", "prompt": "def fibonacci(n):", "max_tokens": 160,
            "temperature": 0, "stream": True, "ignore_eos": True, "route": "vanilla"}
    with httpx.Client(base_url=base, timeout=120) as client:
        while not stop.is_set():
            with client.stream("POST", "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.read()[:200]!r}")
                    return
                for _ in r.iter_lines():
                    pass
            done.append(clock.now())


def test_ramp_scales_up_and_drain_after_streams_scales_down(live):
    from ray import serve  # noqa: F401 (the cluster is the fixture's)
    import ray

    from router.board import get_board

    base, cfg = live
    board = get_board(APP)
    profiles = ray.get(board.profiles.remote())  # the first replica's, measured at its start
    assert len(profiles) == 1, profiles
    stop, done, errors = threading.Event(), [], []
    with Timeline() as timeline:
        assert timeline.running() == 1
        workers = [threading.Thread(target=_stream_until, args=(base, stop, done, errors, timeline))
                   for _ in range(STREAMS)]
        for w in workers:
            w.start()
        t_load = timeline.now()
        t_up = timeline.wait_for(2, timeout_s=300)  # a replica starts in 1-3 min on 2 busy cores
        time.sleep(5)  # both replicas serve a little
        stop.set()
        for w in workers:
            w.join()
        t_last_stream = timeline.now()  # every stream has finished: traffic is over
        t_down = timeline.wait_for(1, timeout_s=DOWNSCALE_DELAY_S + LOOK_BACK_S + 45)
        time.sleep(1.5)
    record = ray.get(board.autoscaler.remote())
    # the second replica runs the same engine on the same hardware: it adopted that profile
    # rather than measuring its own (which would have replaced the entry: replica id and time)
    assert ray.get(board.profiles.remote()) == profiles

    print(f"\nload from t={t_load:.1f}s; 2 replicas at t={t_up}; last stream ended t={t_last_stream:.1f}s;"
          f" back to 1 at t={t_down}\nreplica timeline (t s, running replicas): {timeline.samples}")
    print(f"policy calls: {record['calls']}")
    for e in record["events"]:
        print(f"  {e['pool']:8s} {e['action']:4s} {e['previous']}->{e['replicas']} wanted "
              f"{e['wanted']} reason {e['reason']}{' (pending)' if e['pending'] else ''} "
              f"running {e['running']} in-flight {e['ongoing']} mem-bound {e['memory_bound']}")
    assert not errors, errors
    assert t_up is not None, "the load ramp did not bring the pool to 2 replicas"
    assert t_down is not None, "the pool did not return to 1 replica after the drain"
    # after the last stream ends: Serve's look-back window empties, then the downscale delay
    assert t_down - t_last_stream <= DOWNSCALE_DELAY_S + LOOK_BACK_S + 15
    vanilla = [e for e in record["events"] if e["pool"] == "vanilla"]
    i_down = next(i for i, e in enumerate(vanilla) if e["action"] == "down" and not e["pending"])
    i_wait = i_down
    while i_wait > 0 and vanilla[i_wait - 1]["pending"]:
        i_wait -= 1
    # the downscale delay was honoured: wanted smaller for DOWNSCALE_DELAY_S before the change
    assert vanilla[i_down]["t"] - vanilla[i_wait]["t"] >= DOWNSCALE_DELAY_S - 0.5
    assert record["calls"] > 100  # the control loop runs it every 0.1 s
    applied = [(e["action"], e["reason"]) for e in record["events"] if e["pool"] == "vanilla"
               and not e["pending"]]
    assert ("up", "demand") in applied or ("up", "queue_building") in applied
    assert ("down", "drained") in applied
    assert max(e["replicas"] for e in record["events"]) <= cfg.autoscaling.vanilla.max_replicas


@pytest.mark.skipif(missing("prometheus") is not None, reason=missing("prometheus") or "")
def test_autoscaling_panels_have_series_in_a_real_prometheus(live, tmp_path):
    """The dashboard's panels on the policy's own series (memory-bound fraction, decisions;
    cluster/observability/panels.py) through this app's Ray metrics export: sane, not empty."""
    import ray

    node = next(n for n in ray.nodes() if n["Alive"])
    with LocalPrometheus({"ray": (f"127.0.0.1:{node['MetricsExportPort']}", "/metrics")},
                         tmp_path) as prom:
        results, bad = wait_sane(prom, panel_queries("1m", autoscaled=True), within_s=60)
    assert not bad, bad
    print({k: [(r["metric"].get("pool"), r["value"][1]) for r in v] for k, v in results.items()})
