"""`specserve cluster` against a real kube-apiserver with the KubeRay v1.7.0 CRDs.

The API server validates (server-side dry run, 422s), applies (field managers, conflicts), stores
and watches for real; `FakeKubeRay` (tests/fakes/kuberay.py) writes `status` as the operator would.
Each test runs in its own namespace. Skips without the API server, etcd or the CRDs.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from cluster import cli
from cluster.kube.render import MANIFESTS_DIR
from fakes.kuberay import FakeKubeRay, set_rayjob_status

GPU_CONFIG = str(MANIFESTS_DIR / "configs" / "gpu.yaml")
MANIFESTS = sorted(MANIFESTS_DIR.glob("ray-*.yaml"))
NEW_IMAGE = "registry.example.com/specserve:0.2.0-ray2.60.0-gpu"


@pytest.fixture
def run(kube_api, kube_ns, capsys):
    """`specserve cluster VERB ...` in this test's namespace -> (exit code, stdout, stderr)."""
    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["cluster", *argv, "--kubeconfig", str(kube_api.kubeconfig), "-n", kube_ns])
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture
def objects(kube_api, kube_ns):
    api = client.CustomObjectsApi(kube_api.api_client())

    def get(plural: str, name: str = "specserve") -> dict:
        return api.get_namespaced_custom_object("ray.io", "v1", kube_ns, plural, name)
    return get


@pytest.fixture
def operator(kube_api, kube_ns):
    op = FakeKubeRay(kube_api.api_client(), kube_ns)
    yield op
    op.stop()


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_passes_server_side_dry_run(run, path):
    code, out, err = run("apply", "-f", str(path), "--dry-run")
    assert code == 0, err
    assert "serverside-applied" in out and "(server dry run)" in out


def _applied(run, objects, path) -> tuple[dict, dict]:
    """(rendered, stored) RayCluster spec of the manifest at `path`, applied for real: the API
    server prunes fields its CRD schema does not know, so the stored one is what KubeRay gets."""
    rendered = yaml.safe_load(path.read_text())
    code, _, err = run("apply", "-f", str(path))
    assert code == 0, err
    plural, spec = ("rayservices", "rayClusterConfig") if rendered["kind"] == "RayService" else \
        ("rayjobs", "rayClusterSpec")
    return rendered["spec"][spec], objects(plural, rendered["metadata"]["name"])["spec"][spec]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_the_stored_cluster_keeps_ray_token_auth_and_the_admin_keys(run, objects, path):
    rendered, stored = _applied(run, objects, path)
    assert stored["authOptions"] == rendered["authOptions"]
    assert stored["authOptions"]["mode"] == "token"
    if ".gpu." in path.name:
        assert stored["authOptions"]["secretName"] == "specserve-ray-token"
        env = stored["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "SPECSERVE_ADMIN_API_KEYS", "valueFrom": {"secretKeyRef": {
            "name": "specserve-api-keys", "key": "admin-api-keys"}}} in env


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_the_stored_cluster_keeps_each_groups_ray_node_labels(run, objects, path):
    # the labels each pool's replicas select (<pool>.node_labels) survive CRD pruning
    _, stored = _applied(run, objects, path)
    assert {g["groupName"]: g["labels"] for g in stored["workerGroupSpecs"]} == {
        "vanilla": {"specserve.io/pool": "vanilla"},
        "speculative": {"specserve.io/pool": "speculative"}}
    assert stored["headGroupSpec"]["labels"] == {"specserve.io/role": "head"}


def test_dry_run_refuses_an_unknown_ray_auth_mode(run, tmp_path):
    obj = yaml.safe_load((MANIFESTS_DIR / "ray-service.cpu.yaml").read_text())
    obj["spec"]["rayClusterConfig"]["authOptions"]["mode"] = "password"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(obj))
    code, _, err = run("apply", "-f", str(path), "--dry-run")
    assert code == 1
    assert "422" in err and "authOptions.mode" in err


def test_dry_run_refuses_a_wrong_type_with_the_field(run, tmp_path):
    obj = yaml.safe_load((MANIFESTS_DIR / "ray-service.gpu.yaml").read_text())
    obj["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "two"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(obj))
    code, _, err = run("apply", "-f", str(path), "--dry-run")
    assert code == 1
    assert "422" in err and "workerGroupSpecs" in err and "replicas" in err


def test_apply_is_idempotent_and_status_reads_a_healthy_service(run, objects, operator, capsys):
    code, out, err = run("apply", "--config", GPU_CONFIG)
    assert code == 0, err
    assert "rayservice.ray.io/specserve serverside-applied (generation 1)" in out
    time.sleep(1.1)  # a later second: the 1.20 API server then rewrites managedFields' time
    code, out, _ = run("apply", "--config", GPU_CONFIG)
    assert "rayservice.ray.io/specserve unchanged (generation 1)" in out
    svc = objects("rayservices")
    assert svc["metadata"]["generation"] == 1
    assert [m["manager"] for m in svc["metadata"]["managedFields"]] == ["specserve"]

    operator.reconcile()  # the first cluster comes up and serves
    code, out, _ = run("status")
    with capsys.disabled():
        print(f"\n$ specserve cluster status   # healthy\n{out}")
    assert code == 0
    assert "RayService " in out and ": Ready, 3 serve endpoint(s), generation 1 (observed 1)" in out
    active = objects("rayservices")["status"]["activeServiceStatus"]["rayClusterName"]
    rows = [line.split() for line in out.splitlines()]
    assert ["active", active, "ready", "4/4", "specserve", "RUNNING", "router", "HEALTHY"] in rows
    assert ["speculative", "HEALTHY"] in rows and ["vanilla", "HEALTHY"] in rows
    assert not [line for line in out.splitlines() if line.startswith("pending")]


def test_status_of_a_missing_service_fails_clearly(run):
    code, _, err = run("status", "nope")
    assert code == 1 and "RayService" in err and "/nope not found" in err


def test_scale_sets_bounds_on_the_service_and_its_live_cluster(run, objects, operator):
    run("apply", "--config", GPU_CONFIG)
    operator.reconcile()
    active = objects("rayservices")["status"]["activeServiceStatus"]["rayClusterName"]
    code, out, err = run("scale", "--group", "vanilla", "--min", "2", "--max", "6")
    assert code == 0, err
    assert f"raycluster.ray.io/{active} (active) vanilla: minReplicas 1->2, maxReplicas 4->6" in out
    for obj in (objects("rayservices")["spec"]["rayClusterConfig"],
                objects("rayclusters", active)["spec"]):
        vanilla = next(g for g in obj["workerGroupSpecs"] if g["groupName"] == "vanilla")
        assert (vanilla["minReplicas"], vanilla["maxReplicas"]) == (2, 6)

    code, _, err = run("scale", "--group", "vanilla", "--replicas", "9")
    assert code == 2 and "--replicas: 9 is outside [2, 6]" in err
    code, _, err = run("scale", "--group", "vanilla")
    assert code == 2 and "give --replicas, --min or --max" in err
    code, _, err = run("scale", "--group", "draft", "--max", "3")
    assert code == 2 and "no worker group 'draft' (have: vanilla, speculative)" in err

    # the config still says 1..4: applying it would undo the scale, so the API server objects
    code, _, err = run("apply", "--config", GPU_CONFIG)
    assert code == 1 and "409" in err and "specserve-scale" in err and "--force-conflicts" in err
    code, out, err = run("apply", "--config", GPU_CONFIG, "--force-conflicts")
    assert code == 0, err
    vanilla = objects("rayservices")["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert (vanilla["minReplicas"], vanilla["maxReplicas"]) == (1, 4)


def test_upgrade_watches_until_the_new_cluster_serves(run, objects, operator, capsys):
    run("apply", "--config", GPU_CONFIG)
    operator.reconcile()
    old = objects("rayservices")["status"]["activeServiceStatus"]["rayClusterName"]
    operator.start()
    code, out, err = run("upgrade", "--config", GPU_CONFIG, "--image", NEW_IMAGE,
                         "--timeout-s", "30")
    with capsys.disabled():
        print(f"\n$ specserve cluster upgrade --image {NEW_IMAGE}\n{out}{err}")
    assert code == 0, err
    new = objects("rayservices")["status"]["activeServiceStatus"]["rayClusterName"]
    assert new != old and f"new RayCluster {new} serves generation 2" in out
    assert f"applied generation 2; active RayCluster {old}" in out
    assert objects("rayclusters", new)["spec"]["headGroupSpec"]["template"]["spec"][
        "containers"][0]["image"] == NEW_IMAGE
    code, out, _ = run("status")
    with capsys.disabled():
        print(f"\n$ specserve cluster status   # after the upgrade\n{out}")
    assert not [line for line in out.splitlines() if line.startswith("pending")]
    assert ": Ready," in out


def test_stuck_upgrade_times_out_with_the_reason_and_leaves_the_active_cluster_alone(
        run, objects, operator, kube_api, kube_ns, capsys):
    run("apply", "--config", GPU_CONFIG)
    operator.reconcile()
    before = objects("rayservices")
    old = before["status"]["activeServiceStatus"]["rayClusterName"]
    old_cluster = objects("rayclusters", old)
    operator.new_cluster_serves = False
    operator.start()

    status_while_stuck = {}

    def snapshot():  # `specserve cluster status` in another process, during the stuck upgrade
        time.sleep(1.5)
        status_while_stuck["out"] = subprocess.run(
            [sys.executable, "-m", "cluster.cli", "cluster", "status", "--kubeconfig",
             str(kube_api.kubeconfig), "-n", kube_ns], capture_output=True, text=True,
            check=True, cwd=MANIFESTS_DIR.parent).stdout

    watcher = threading.Thread(target=snapshot)
    watcher.start()
    code, out, err = run("upgrade", "--config", GPU_CONFIG, "--image", NEW_IMAGE,
                         "--timeout-s", "8")
    watcher.join()
    with capsys.disabled():
        print(f"\n$ specserve cluster status   # upgrade stuck\n{status_while_stuck['out']}")
        print(f"\n$ specserve cluster upgrade --image {NEW_IMAGE} --timeout-s 8\n{out}{err}")
    assert code == 1
    stuck = status_while_stuck["out"]
    assert "UpgradeInProgress  True    BothActivePendingClustersExist" in stuck
    pending = [line.split() for line in stuck.splitlines() if line.startswith("pending")]
    assert pending and pending[0][2:6] == ["-", "0/4", "specserve", "DEPLOYING"]
    assert "UPDATING" in stuck and "waiting for the cluster to auto-scale" in stuck
    assert "upgrade timed out: pending RayCluster" in err
    assert "did not become ready in 8 s: state not ready, workers 0/4 ready" in err
    assert "app specserve DEPLOYING" in err and "deployment vanilla UPDATING" in err
    assert f"the active RayCluster {old} still serves the previous version" in err
    assert "reverted RayService specserve to the spec of generation 1" in err

    deadline = time.monotonic() + 10  # the operator drops the pending cluster after the revert
    while objects("rayservices")["status"].get("pendingServiceStatus") and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    after = objects("rayservices")
    assert after["status"]["activeServiceStatus"]["rayClusterName"] == old
    assert not after["status"].get("pendingServiceStatus")
    assert after["spec"] == before["spec"]
    untouched = objects("rayclusters", old)  # never patched: same version, same spec
    assert untouched["metadata"]["resourceVersion"] == old_cluster["metadata"]["resourceVersion"]


def test_upgrade_with_a_bad_image_is_refused_before_any_api_call(run):
    code, _, err = run("upgrade", "--config", GPU_CONFIG, "--image", "rayproject/ray:2.9.0-gpu")
    assert code == 2 and "kubernetes.image: tag '2.9.0-gpu' does not carry ray_version" in err


def _play_rayjob(kube_api, ns: str, steps: list[dict]) -> threading.Thread:
    """Waits for the one RayJob in `ns`, then writes each status step, 0.3 s apart."""
    api = client.CustomObjectsApi(kube_api.api_client())

    def play():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            jobs = api.list_namespaced_custom_object("ray.io", "v1", ns, "rayjobs")["items"]
            if jobs:
                break
            time.sleep(0.1)
        for step in steps:
            time.sleep(0.3)
            set_rayjob_status(kube_api.api_client(), ns, jobs[0]["metadata"]["name"], **step)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("final, code_expected", [
    ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, 0),
    ({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed",
      "message": "batch.run exited with 1"}, 1),
])
def test_submit_batch_creates_a_rayjob_and_follows_it(run, kube_api, kube_ns, objects,
                                                      final, code_expected):
    player = _play_rayjob(kube_api, kube_ns, [
        {"jobDeploymentStatus": "Initializing"},
        {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, final])
    code, out, err = run("submit-batch", "--config", GPU_CONFIG, "--input", "/data/q.jsonl",
                         "--job-name", "nightly", "--timeout-s", "20")
    player.join()
    assert code == code_expected, err
    job = objects("rayjobs", "nightly")
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert "--input /data/q.jsonl --output /data/out.jsonl" in job["spec"]["entrypoint"]
    lines = out.splitlines()
    assert "rayjob.ray.io/nightly created" in lines[0]
    assert any("deployment Running, job RUNNING" in line for line in lines)
    assert f"deployment {final['jobDeploymentStatus']}, job {final['jobStatus']}" in lines[-1]
    if code_expected:
        assert "AppFailed: batch.run exited with 1" in lines[-1]


def test_delete_removes_the_service(run, objects):
    run("apply", "--config", GPU_CONFIG)
    code, out, _ = run("delete")
    assert code == 0 and "rayservice.ray.io/specserve deleted" in out
    code, out, _ = run("delete")
    assert code == 1 and "not found" in out


def test_namespace_and_context_come_from_the_kubeconfig_like_kubectl(kube_api, kube_ns, tmp_path,
                                                                     capsys):
    conf = yaml.safe_load(Path(kube_api.kubeconfig).read_text())
    other = dict(conf["contexts"][0], name="other")
    other["context"] = dict(other["context"], namespace=kube_ns)
    conf["contexts"].append(other)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(conf))
    assert cli.main(["cluster", "--kubeconfig", str(path), "--context", "other", "apply",
                     "--config", GPU_CONFIG]) == 0
    capsys.readouterr()
    api = client.CustomObjectsApi(kube_api.api_client())
    assert api.get_namespaced_custom_object("ray.io", "v1", kube_ns, "rayservices", "specserve")
    # KUBECONFIG from the environment, the context's namespace: `status` finds it without flags
    conf["current-context"] = "other"
    path.write_text(yaml.safe_dump(conf))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(path))
        assert cli.main(["cluster", "status"]) == 0
    assert f"RayService {kube_ns}/specserve" in capsys.readouterr().out


def test_a_speculator_canary_goes_through_the_rayservice_in_place(run, objects, operator,
                                                                   kube_api, kube_ns):
    """`specserve speculator rollout --rayservice`'s applier: the override lands in serveConfigV2
    (same application, code version and cluster spec, so KubeRay updates the active cluster in
    place), a stale apply of the config conflicts with it, and a roll-back removes it."""
    from cluster.kube.client import Kube
    from cluster.kube.speculator import RayServiceOverride
    from core.rollout import CANARY_ENV, canary_env
    from deployments.rollout import RolloutError

    run("apply", "--config", GPU_CONFIG)
    operator.reconcile()
    before = objects("rayservices")
    active = before["status"]["activeServiceStatus"]["rayClusterName"]
    kube = Kube(client.CustomObjectsApi(kube_api.api_client()), kube_ns)
    options = {"num_gpus": 4, "runtime_env": {"env_vars": {"VLLM_USE_V1": "1"}}}
    override = RayServiceOverride(kube, "specserve", "specserve", actor_options=options)
    value = canary_env("/models/eagle3-v1", 1)
    override(value)
    after = objects("rayservices")
    old_app = yaml.safe_load(before["spec"]["serveConfigV2"])["applications"][0]
    new_app = yaml.safe_load(after["spec"]["serveConfigV2"])["applications"][0]
    assert {k: v for k, v in new_app.items() if k != "deployments"} == old_app
    assert new_app["deployments"] == [{"name": "speculative", "ray_actor_options": {
        "num_gpus": 4, "runtime_env": {"env_vars": {"VLLM_USE_V1": "1", CANARY_ENV: value}}}}]
    assert after["spec"]["rayClusterConfig"] == before["spec"]["rayClusterConfig"]
    assert "specserve-rollout" in {m["manager"] for m in after["metadata"]["managedFields"]}
    operator.reconcile()  # no new RayCluster: the active one is updated in place
    status = objects("rayservices")["status"]
    assert status["activeServiceStatus"]["rayClusterName"] == active
    assert status.get("pendingServiceStatus") is None

    # the unchanged config would undo the override: the API server says who owns it
    code, _, err = run("apply", "--config", GPU_CONFIG)
    assert code == 1 and "409" in err and "specserve-rollout" in err

    override(None)  # back: the config's speculator, serveConfigV2 as rendered
    assert objects("rayservices")["spec"]["serveConfigV2"] == before["spec"]["serveConfigV2"]
    code, _, err = run("apply", "--config", GPU_CONFIG)  # nothing left to conflict with
    assert code == 0, err
    with pytest.raises(RolloutError, match="--app: the RayService's serveConfigV2 has no "
                       "application 'other'"):
        RayServiceOverride(kube, "specserve", "other", actor_options=options)(value)
    with pytest.raises(RolloutError, match=f"--rayservice: no RayService {kube_ns}/nope"):
        RayServiceOverride(kube, "nope", "specserve", actor_options=options)(value)
