"""Routing under faults on a real local Serve app deployed as `specserve serve` does
(`deployments.deploy.run_app`, autoscaling policy included), both pools autoscaled 0..1:

- a pool scaled to zero starts when a request wants it: the request waits for it when no other
  pool may take it (`x-specserve-scaled-from-zero-s`), else goes to the other pool with reason
  `pool_scaled_to_zero` while the wake counts as demand;
- `min_p` never reaches the speculative pool: not through a runtime pin, not by spilling over
  from a full vanilla pool (429 instead), not when forced (400 naming it);
- a StatsBoard restart does not cancel a request in flight nor lose the pin; a redeploy does
  lose the pin.

Its own cluster and app: run it alone, under the heavy lock (tests/e2e/test_autoscaling_live.py).
"""

from __future__ import annotations

import os
import time

import httpx
import pytest

from core import DEFAULT_CONFIG_PATH, RAY_NODE_ENV, SpecserveConfig, haproxy_ports_env
from tests.local_ray import start_own_ray, until

pytestmark = [pytest.mark.serve, pytest.mark.own_ray]

PORT = int(os.environ.get("SPECSERVE_TEST_PORT", "8123"))
APP = "specserve-faults"
MODEL = "specserve-tiny"
CODE = "def fibonacci(n):\n    "
CHAT = "Tell me about your weekend and how you feel today."
DOWNSCALE_DELAY_S = 20.0
WAKE_S = 300.0  # a replica's cold start on 2 busy cores, with margin
CAP = 2  # server.max_in_flight_per_replica: two streams fill a pool


def _config(**router) -> SpecserveConfig:
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    for pool in ("vanilla", "speculative"):
        data[pool] |= {"enforce_eager": True, "profile_max_batch": 2, "max_num_seqs": 8,
                       "cpu_kvcache_space_gib": 1}
    data["server"] |= {"port": PORT, "max_in_flight_per_replica": CAP,
                       "max_sequences_per_request": CAP}
    data["router"] |= router
    data["autoscaling"] = {
        "enabled": True, "budget_accelerators": 2,
        "vanilla": {"min_replicas": 0, "max_replicas": 1},
        "speculative": {"min_replicas": 0, "max_replicas": 1},
        "upscale_delay_s": 1.0, "downscale_delay_s": DOWNSCALE_DELAY_S,
        "target_ongoing_requests": 2, "metrics_interval_s": 0.5, "look_back_period_s": 2.0,
        "scale_from_zero_wait_s": WAKE_S}
    return SpecserveConfig.from_dict(data)


@pytest.fixture(scope="module")
def base(lab) -> str:
    import ray
    from ray import serve

    from deployments.deploy import run_app

    for name, value in RAY_NODE_ENV.items():
        os.environ.setdefault(name, value)
    os.environ.update(haproxy_ports_env(PORT))  # not the session cluster's HAProxy ports
    os.environ["RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = "1"
    os.environ["RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = "1"
    start_own_ray(4)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": PORT})
        run_app(_config(), APP, timeout_s=300)
        yield f"http://127.0.0.1:{PORT}"
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture
def client(base):
    with httpx.Client(base_url=base, timeout=WAKE_S + 60) as c:
        yield c


def _running(pool: str) -> int:
    from ray import serve

    return serve.status().applications[APP].deployments[pool].replica_states.get("RUNNING", 0)


def _post(client, prompt=CODE, **body) -> httpx.Response:
    return client.post("/v1/completions", json={"model": MODEL, "prompt": prompt,
                                                "max_tokens": 4, "temperature": 0, **body})


def _metric(client, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in client.get("/metrics").text.splitlines()
               if line.startswith(line_start))


def _served_by(client, pool: str) -> bool:
    """A request forced to `pool` ran there (while `pool` is at zero another pool takes it)."""
    r = _post(client, route=pool)
    assert r.status_code == 200, r.text
    return r.headers["x-specserve-route"] == pool


def test_a_request_no_other_pool_may_take_waits_for_its_pool_to_start(client):
    assert (_running("vanilla"), _running("speculative")) == (0, 0)
    r = _post(client, min_p=0.1)  # vanilla only, and vanilla is at zero
    assert r.status_code == 200, r.text
    assert (r.headers["x-specserve-route"], r.headers["x-specserve-reason"]) == (
        "vanilla", "unsupported_option")
    assert 0 < float(r.headers["x-specserve-scaled-from-zero-s"]) < WAKE_S
    assert _running("speculative") == 0  # nothing woke the pool it may not use


def test_a_request_for_a_pool_at_zero_goes_elsewhere_and_wakes_it(client):
    r = _post(client)  # code at T=0 wants the speculative pool, at zero
    assert r.status_code == 200, r.text
    assert (r.headers["x-specserve-route"], r.headers["x-specserve-reason"]) == (
        "vanilla", "pool_scaled_to_zero")
    assert until(lambda: _served_by(client, "speculative"), WAKE_S), \
        "the speculative pool did not start for the requests that wanted it"
    assert _metric(client, 'specserve_pool_wakes_total{pool="speculative"}') >= 1
    assert _metric(client, 'specserve_requests_total{reason="pool_scaled_to_zero"') >= 1


def test_min_p_never_reaches_the_speculative_pool(base, client):
    assert _running("speculative") == 1 and _running("vanilla") == 1
    try:  # a runtime pin to the speculative pool
        assert client.put("/admin/policy", json={"pin": "speculative"}).status_code == 200
        r = _post(client, min_p=0.1)
        assert r.status_code == 200, r.text
        assert (r.headers["x-specserve-route"], r.headers["x-specserve-reason"]) == (
            "vanilla", "unsupported_option")
    finally:
        client.put("/admin/policy", json={"pin": None})
    forced = _post(client, min_p=0.1, route="speculative")
    assert forced.status_code == 400 and forced.json()["error"]["param"] == "min_p"
    long = {"model": MODEL, "prompt": CODE, "max_tokens": 600, "temperature": 0,
            "ignore_eos": True, "stream": True, "route": "vanilla"}
    with httpx.Client(base_url=base, timeout=120) as c:
        streams = [c.send(c.build_request("POST", "/v1/completions", json=long), stream=True)
                   for _ in range(CAP)]
        try:  # the vanilla pool full, the speculative pool idle
            assert [s.status_code for s in streams] == [200] * CAP
            full = _post(client, CHAT, min_p=0.1)
            assert full.status_code == 429, full.text
            assert full.json()["error"]["code"] == 429
            assert int(full.headers["retry-after"]) >= 1
            assert full.headers["x-specserve-route"] == "vanilla"
            plain = _post(client, CHAT)  # without min_p the speculative pool takes it
            assert (plain.status_code, plain.headers["x-specserve-route"]) == (200, "speculative")
        finally:
            for s in streams:
                s.close()


def test_a_board_restart_neither_cancels_a_request_nor_loses_the_pin(client):
    import concurrent.futures

    import ray

    from router.board import get_board

    assert until(lambda: _running("vanilla") == 1, WAKE_S)
    assert client.put("/admin/policy", json={"pin": "vanilla"}).status_code == 200
    try:
        body = {"max_tokens": 900, "ignore_eos": True, "route": "vanilla"}
        with concurrent.futures.ThreadPoolExecutor(1) as pool, \
                httpx.Client(base_url=str(client.base_url), timeout=120) as other:
            pending = pool.submit(_post, other, **body)
            time.sleep(1.0)
            ray.kill(get_board(APP), no_restart=False)  # Ray restarts it, empty
            r = pending.result()
        assert r.status_code == 200, r.text
        assert "x-specserve-retried" not in r.headers
        assert r.json()["usage"]["completion_tokens"] == 900
        time.sleep(3.0)  # a few share periods against the restarted board
        assert client.get("/admin/policy").json()["pin"] == "vanilla"
    finally:
        client.put("/admin/policy", json={"pin": None})


def test_a_redeploy_starts_without_the_runtime_pin(client):
    from deployments.deploy import run_app

    assert client.put("/admin/policy", json={"pin": "vanilla"}).json()["source"] == "runtime"
    run_app(_config(max_speculative_temperature=0.6), APP, timeout_s=300)
    assert until(lambda: client.get("/admin/policy").json() == {
        "pin": "auto", "source": "config", "config_pin": "auto"}, 60), \
        f"the pin outlived the redeploy: {client.get('/admin/policy').json()}"


def _router_sees_no_replica(client) -> bool:
    return all(p["replicas"] == 0 for p in client.get("/health").json()["pools"].values())


def test_pools_that_drained_to_zero_start_again_for_requests(client):
    assert until(lambda: _router_sees_no_replica(client), DOWNSCALE_DELAY_S + 90), \
        "the idle pools did not drain to zero"
    r = _post(client)  # both pools at zero: it waits for the one it wants
    assert r.status_code == 200, r.text
    assert float(r.headers["x-specserve-scaled-from-zero-s"]) > 0
    woke = r.headers["x-specserve-route"]
    other = "vanilla" if woke == "speculative" else "speculative"
    # `other` at zero: the pool that is up takes it (the wake that follows is
    # test_a_request_for_a_pool_at_zero_goes_elsewhere_and_wakes_it's; not waited for again)
    r = _post(client, route=other)
    assert (r.status_code, r.headers["x-specserve-route"], r.headers["x-specserve-reason"]) == (
        200, woke, "pool_scaled_to_zero")
