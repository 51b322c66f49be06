"""Multi-node placement on a real Ray cluster of three local nodes: a head (0 CPUs:
Serve's controller, HTTP proxy and the router) and one worker node per pool (1 CPU each, started
with `--labels specserve.io/pool=<pool>`), the default config's application deployed on it as
`specserve serve` does (`deployments.deploy.run_app`) with each pool's `node_labels` set:

- each pool's replica runs on its own node, the router on the head (Serve's replica details);
- a completion is served by each pool, end to end over HTTP;
- `specserve batch` under `ray job submit` to the head's job server: the driver runs on the head
  and its rows reach both pools (each row's `x-specserve-route`);
- losing the speculative node (its raylet killed) fails the pool over to vanilla (reason
  `pool_unavailable`), and the pool serves again once a node with its labels rejoins.

Its own cluster and app (`own_ray`): both pools at one replica, eager engines, ~3 min on 2 cores.
Both worker nodes share this machine's cores: each replica leases one (deployments/cores.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest

from core import DEFAULT_CONFIG_PATH, RAY_NODE_ENV, SpecserveConfig, haproxy_ports_env
from deployments.cores import CORES_DIR_ENV, SHARE_CORES_ENV
from tests.local_ray import until

pytestmark = [pytest.mark.serve, pytest.mark.own_ray]

PORT = int(os.environ.get("SPECSERVE_TEST_PORT", "8123"))
APP = "specserve-multinode"
MODEL = "specserve-tiny"
POOL_LABEL = "specserve.io/pool"
HEAD_LABELS = {"specserve.io/role": "head"}
POOLS = ("vanilla", "speculative")
BACK_S = 300.0  # a replacement replica's cold start on 2 busy cores, with margin
REPO = Path(__file__).resolve().parents[2]


def _config() -> SpecserveConfig:
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    for pool in POOLS:
        data[pool] |= {"num_replicas": 1, "enforce_eager": True, "profile_max_batch": 2,
                       "max_num_seqs": 8, "cpu_kvcache_space_gib": 1,
                       "node_labels": {POOL_LABEL: pool}}
    data["server"] |= {"port": PORT, "node_labels": HEAD_LABELS}
    data["autoscaling"] = {"enabled": False}
    return SpecserveConfig.from_dict(data)


class _Cluster:
    """The local cluster and the node ids of what it runs."""

    def __init__(self, ray_cluster, workers: dict):
        self.ray = ray_cluster
        self.workers = workers  # pool -> the node `ray.cluster_utils.Cluster.add_node` returned
        self.engine_pids: set[int] = set()

    def add_worker(self, pool: str):
        self.workers[pool] = self.ray.add_node(num_cpus=1, labels={POOL_LABEL: pool})
        return self.workers[pool]


@pytest.fixture(scope="module")
def cluster(lab):
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from deployments.deploy import run_app

    if ray.is_initialized():
        pytest.fail("this process is already connected to a Ray cluster (mark modules own_ray)")
    saved = {k: os.environ.get(k) for k in (CORES_DIR_ENV, SHARE_CORES_ENV)}
    for name, value in RAY_NODE_ENV.items():
        os.environ.setdefault(name, value)
    os.environ.update(haproxy_ports_env(PORT))  # not the session cluster's HAProxy ports
    # The nodes' raylets inherit these: the three nodes are this machine, one set of cores.
    os.environ[CORES_DIR_ENV] = tempfile.mkdtemp(prefix="specserve-cores-")
    os.environ[SHARE_CORES_ENV] = "1"  # a replacement may start before the dead one's lease drops
    # The head's dashboard is the job server `ray job submit` talks to.
    ray_cluster = Cluster(initialize_head=True, connect=True, head_node_args={
        "num_cpus": 0, "labels": HEAD_LABELS, "include_dashboard": True,
        "dashboard_host": "127.0.0.1", "dashboard_port": _free_port()})
    c = _Cluster(ray_cluster, {})
    try:
        for pool in POOLS:
            c.add_worker(pool)
        ray_cluster.wait_for_nodes()
        # One proxy, on the head: every node of this cluster is this machine, one port.
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": PORT})
        t0 = time.monotonic()
        run_app(_config(), APP, timeout_s=300)
        print(json.dumps({"app_running_after_s": round(time.monotonic() - t0, 1)}))
        yield c
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            ray_cluster.shutdown()
            _kill_orphans(c.engine_pids)
            for name, value in saved.items():  # later modules lease as they would without this
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_orphans(pids: set[int]) -> None:
    """Ends the engine processes of this module's replicas that outlived them (a replica whose
    raylet was killed cannot stop its engine): never leave 1.7 GB orphans on a shared machine."""
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                p.kill()
        except psutil.NoSuchProcess:
            continue


@pytest.fixture
def client(cluster):
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=BACK_S) as c:
        yield c


def _placement() -> dict[str, list[str]]:
    """Deployment -> node ids of its RUNNING replicas (Serve's replica details)."""
    from core.ray_private import get_global_client

    app = get_global_client().get_serve_details()["applications"][APP]
    return {name: [r["node_id"] for r in d["replicas"] if r["state"] == "RUNNING"]
            for name, d in app["deployments"].items()}


def _record_engines(cluster: _Cluster) -> dict[str, list[int] | None]:
    """Records each pool's engine processes (for cleanup); returns the cores each pool's replica
    leased (None: it found none free and runs unbound)."""
    from ray import serve

    cores = {}
    for pool in POOLS:
        engine = serve.get_deployment_handle(pool, APP).engine_processes.remote().result()
        cluster.engine_pids |= set(engine["pids"])
        cores[pool] = engine["cores"]
    return cores


def _post(client, route: str) -> httpx.Response:
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": "def fibonacci(n):\n    ",
                                             "max_tokens": 4, "temperature": 0, "route": route})
    assert r.status_code == 200, r.text
    return r


def test_each_pool_runs_on_its_own_node_and_the_router_on_the_head(cluster):
    import ray

    cores = _record_engines(cluster)
    head = ray.get_runtime_context().get_node_id()
    nodes = {"head": head, **{p: n.node_id for p, n in cluster.workers.items()}}
    placement = _placement()
    print(json.dumps({"nodes": nodes, "replica_nodes": placement, "cores": cores}))
    assert None not in cores.values() and not set(cores["vanilla"]) & set(cores["speculative"])
    labels = {n["NodeID"]: n["Labels"] for n in ray.nodes() if n["Alive"]}  # Ray's own record
    assert [labels[n][POOL_LABEL] for p in POOLS for n in placement[p]] == list(POOLS)
    assert all(labels[n].items() >= HEAD_LABELS.items() for n in placement["router"])
    assert placement["vanilla"] == [nodes["vanilla"]]
    assert placement["speculative"] == [nodes["speculative"]]
    assert placement["router"] == [head]


@pytest.mark.parametrize("pool", POOLS)
def test_each_pool_serves_a_completion(client, pool):
    r = _post(client, pool)
    assert (r.headers["x-specserve-route"], r.headers["x-specserve-reason"]) == (pool, "requested")
    assert r.json()["choices"][0]["text"]


def test_a_batch_job_runs_its_driver_on_the_head_and_reaches_both_pools(cluster, tmp_path):
    """`ray job submit` as a user types it (cluster/README), the job using the running app."""
    import ray
    from ray.job_submission import JobSubmissionClient

    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(_config().model_dump(mode="json")))  # JSON is YAML
    prompts = ["def fibonacci(n):\n    ", "class Stack:\n    def __init__(self):\n",
               "The history of the city begins", "Q: What is 12 * 7? A:"]
    rows = [{"custom_id": f"{route}-{i}", "method": "POST", "url": "/v1/completions",
             "body": {"model": MODEL, "prompt": p, "max_tokens": 8, "temperature": 0,
                      **({} if route == "auto" else {"route": route})}}
            for route in ("auto", *POOLS) for i, p in enumerate(prompts)]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    url, job_id = cluster.ray.webui_url, f"multinode-batch-{int(time.time())}"
    url = url if url.startswith("http") else f"http://{url}"
    # A head with ~/.ray/auth_token enables token auth; the job CLI needs the mode said.
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", url,
         "--working-dir", str(REPO), "--submission-id", job_id, "--",
         sys.executable, "-m", "cluster.cli", "batch", "--config", str(config), "--app", APP,
         "--input", str(inp), "--output", str(out), "--progress-interval-s", "5"],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = [json.loads(t) for t in out.read_text().splitlines()]
    routes = {r["custom_id"]: r["response"]["headers"]["x-specserve-route"] for r in lines
              if r["response"]["status_code"] == 200}
    driver = JobSubmissionClient(url).get_job_info(job_id).driver_node_id
    head = ray.get_runtime_context().get_node_id()
    print(json.dumps({"driver_node": driver, "head": head, "routes": routes}))
    assert sorted(routes) == sorted(r["custom_id"] for r in rows), proc.stdout[-3000:]
    assert driver == head
    assert {routes[f"{pool}-{i}"] for pool in POOLS for i in range(len(prompts))} == set(POOLS)
    assert all(routes[f"{pool}-{i}"] == pool for pool in POOLS for i in range(len(prompts)))
    assert f"using the running application {APP!r}" in proc.stdout


def test_a_lost_worker_node_fails_its_pool_over_and_it_returns_on_a_new_node(cluster, client):
    from ray import serve

    engines = serve.get_deployment_handle("speculative", APP).engine_processes.remote().result()
    cluster.ray.remove_node(cluster.workers["speculative"], allow_graceful=False)  # SIGKILL
    t_kill = time.monotonic()

    def failed_over():
        r = client.post("/v1/completions", json={"model": MODEL, "prompt": "def f(x):\n    ",
                                                 "max_tokens": 4, "temperature": 0,
                                                 "route": "speculative"})
        return r.status_code == 200 and (r.headers["x-specserve-route"],
                                         r.headers["x-specserve-reason"]) == (
            "vanilla", "pool_unavailable")

    assert until(failed_over, 60), "no pool_unavailable fallback within 60 s of the node's loss"
    failover_s = time.monotonic() - t_kill
    time.sleep(5)
    # A raylet killed with SIGKILL cannot stop its workers' children: seen, not asserted here
    # (the module's teardown ends them).
    survivors = [pid for pid in engines["pids"] if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    node = cluster.add_worker("speculative")
    cluster.ray.wait_for_nodes()

    def back():
        return _post(client, "speculative").headers["x-specserve-route"] == "speculative"

    assert until(back, BACK_S, period_s=3), f"speculative not back within {BACK_S:.0f} s"
    cores = _record_engines(cluster)
    placement = _placement()
    print(json.dumps({"failover_s": round(failover_s, 1),
                      "back_after_s": round(time.monotonic() - t_kill, 1),
                      "new_speculative_node": node.node_id, "replica_nodes": placement,
                      "engine_processes_outliving_the_node_5s": survivors,
                      "cores": cores}))
    assert placement["speculative"] == [node.node_id]
    assert _post(client, "vanilla").headers["x-specserve-route"] == "vanilla"
