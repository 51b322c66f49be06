"""The status readers (cluster/kube/status.py) on RayService/RayJob objects shaped as KubeRay v1.7.0
writes them: pure functions, no API server."""

from __future__ import annotations

import yaml

from cluster.kube.status import format_rayservice, placement_rows, rayjob_verdict, stuck_reason, \
    table, upgrade_verdict
from cluster.kube.render import MANIFESTS_DIR


def _svc(generation=2, observed=2, active="svc-a", pending=None, ready=True,
         pending_apps=None) -> dict:
    def cluster(name, apps):
        return {"rayClusterName": name,
                "rayClusterStatus": {"state": "ready" if apps == "RUNNING" else None,
                                     "readyWorkerReplicas": 2 if apps == "RUNNING" else 0,
                                     "desiredWorkerReplicas": 2},
                "applicationStatuses": {"specserve": {"status": apps, "serveDeploymentStatuses": {
                    "vanilla": {"status": "HEALTHY" if apps == "RUNNING" else "UPDATING",
                                "message": "" if apps == "RUNNING" else "waiting for GPU"}}}}}

    status = {"observedGeneration": observed, "numServeEndpoints": 2,
              "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                              "reason": "NonZeroServeEndpoints", "message": ""}],
              "activeServiceStatus": cluster(active, "RUNNING") if active else {}}
    if pending:
        status["pendingServiceStatus"] = cluster(pending, pending_apps or "DEPLOYING")
    return {"metadata": {"name": "specserve", "namespace": "prod", "generation": generation},
            "status": status}


def test_upgrade_waits_until_kuberay_observed_the_new_generation():
    v = upgrade_verdict(_svc(observed=1), "svc-a", 2)
    assert not v.done and "has not observed generation 2" in v.detail


def test_upgrade_waits_while_a_cluster_is_pending_and_says_what_is_not_ready():
    v = upgrade_verdict(_svc(pending="svc-b"), "svc-a", 2)
    assert not v.done
    assert v.detail == ("pending RayCluster svc-b: state not ready, workers 0/2 ready, app "
                        "specserve DEPLOYING, deployment vanilla UPDATING: waiting for GPU")


def test_upgrade_is_done_when_the_new_cluster_serves():
    v = upgrade_verdict(_svc(active="svc-b"), "svc-a", 2)
    assert v.done and v.detail == "new RayCluster svc-b serves generation 2"


def test_an_in_place_change_is_done_on_the_same_cluster():
    v = upgrade_verdict(_svc(), "svc-a", 2)
    assert v.done and v.detail == "RayCluster svc-a serves generation 2"


def test_not_ready_service_is_not_done():
    assert not upgrade_verdict(_svc(active="svc-b", ready=False), "svc-a", 2).done


def test_stuck_reason_names_the_pending_cluster_and_the_active_one():
    why = stuck_reason(_svc(pending="svc-b"), "svc-a", 600)
    assert why.startswith("pending RayCluster svc-b did not become ready in 600 s: state not ready")
    assert why.endswith("the active RayCluster svc-a still serves the previous version")


def test_status_table_has_one_row_per_deployment():
    out = format_rayservice(_svc(pending="svc-b"))
    assert out.splitlines()[0] == ("RayService prod/specserve: Ready, 2 serve endpoint(s), "
                                   "generation 2 (observed 2)")
    rows = [line.split() for line in out.splitlines()]
    assert ["active", "svc-a", "ready", "2/2", "specserve", "RUNNING", "vanilla", "HEALTHY"] in rows
    assert ["pending", "svc-b", "-", "0/2", "specserve", "DEPLOYING", "vanilla", "UPDATING",
            "waiting", "for", "GPU"] in rows


def test_status_of_a_fresh_service_says_what_is_missing():
    out = format_rayservice({"metadata": {"name": "s", "namespace": "n", "generation": 1}})
    assert "no conditions yet: is the KubeRay operator running?" in out
    assert "(no RayCluster yet)" in out


def test_rayjob_verdict():
    assert not rayjob_verdict({}).done
    ok = rayjob_verdict({"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}})
    assert ok.done and ok.ok
    bad = rayjob_verdict({"status": {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED",
                                     "reason": "DeadlineExceeded"}})
    assert bad.done and not bad.ok and "DeadlineExceeded" in bad.detail


def test_table_aligns_columns():
    assert table(["A", "BB"], [["xyz", "1"]]) == "A    BB\nxyz  1"


def test_status_shows_which_pool_runs_on_which_group():
    obj = yaml.safe_load((MANIFESTS_DIR / "ray-service.gpu.yaml").read_text())
    assert placement_rows(obj) == [
        ["head", "specserve.io/role=head", "router"],
        ["vanilla", "specserve.io/pool=vanilla", "vanilla"],
        ["speculative", "specserve.io/pool=speculative", "speculative"]]
    out = format_rayservice({**obj, **_svc()}).splitlines()
    assert out[-4].split() == ["GROUP", "RAY", "NODE", "LABELS", "RUNS"]
    assert out[-2].split() == ["vanilla", "specserve.io/pool=vanilla", "vanilla"]
