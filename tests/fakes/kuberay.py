"""A fake KubeRay operator for the real API server of tests/kubeapi.py: no controller, Ray cluster
or kubelet can run here, so `FakeKubeRay` writes a RayService's `status` (and its RayClusters) the
way KubeRay v1.7.0 does, and `set_rayjob_status` a RayJob's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
import threading
import time

from kubernetes import client


def cluster_hash(cluster_spec: dict) -> str:
    """KubeRay's rule for "needs a new RayCluster": the spec without worker replica counts."""
    spec = copy.deepcopy(cluster_spec)
    for group in spec.get("workerGroupSpecs") or []:
        for key in ("replicas", "minReplicas", "maxReplicas", "scaleStrategy"):
            group.pop(key, None)
    spec.pop("upgradeStrategy", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


class FakeKubeRay:
    """Plays the KubeRay operator for one RayService: creates its RayClusters and writes its
    `status` as KubeRay v1.7.0 does (NewCluster upgrades).

    `new_cluster_serves=False` leaves every new (pending) cluster stuck: head not ready, the Serve
    app DEPLOYING, a deployment UPDATING while it waits for GPUs.
    """

    APP = "specserve"
    DEPLOYMENTS = ("router", "speculative", "vanilla")

    def __init__(self, api: client.ApiClient, namespace: str, name: str = "specserve"):
        self.api, self.ns, self.name = client.CustomObjectsApi(api), namespace, name
        self.new_cluster_serves = True
        self.clusters: dict[str, str] = {}  # RayCluster name -> cluster_hash of its spec
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []

    def _args(self, plural: str):
        return "ray.io", "v1", self.ns, plural

    def _status(self, plural: str, name: str, status: dict) -> dict:
        return self.api.patch_namespaced_custom_object_status(
            *self._args(plural), name, {"status": status},
            _content_type="application/merge-patch+json")

    def _create_cluster(self, spec: dict, ready: bool) -> str:
        name = f"{self.name}-raycluster-{secrets.token_hex(3)}"
        body = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": name, "labels": {"ray.io/originated-from-crd": "RayService"}},
                "spec": spec}
        self.api.create_namespaced_custom_object(*self._args("rayclusters"), body)
        desired = sum(g.get("replicas", 0) for g in spec.get("workerGroupSpecs") or [])
        self._status("rayclusters", name, {"state": "ready" if ready else None,
                                           "desiredWorkerReplicas": desired,
                                           "readyWorkerReplicas": desired if ready else 0})
        self.clusters[name] = cluster_hash(spec)
        return name

    @staticmethod
    def _condition(kind: str, ok: bool, reason: str, message: str) -> dict:
        return {"type": kind, "status": "True" if ok else "False", "reason": reason,
                "message": message, "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                         time.gmtime())}

    def _serving(self, cluster: str, spec: dict) -> dict:
        workers = sum(g.get("replicas", 0) for g in spec.get("workerGroupSpecs") or [])
        return {"rayClusterName": cluster,
                "rayClusterStatus": {"state": "ready", "readyWorkerReplicas": workers,
                                     "desiredWorkerReplicas": workers},
                "applicationStatuses": {self.APP: {"status": "RUNNING", "serveDeploymentStatuses":
                                                   {d: {"status": "HEALTHY"}
                                                    for d in self.DEPLOYMENTS}}}}

    def _stuck(self, cluster: str, spec: dict) -> dict:
        workers = sum(g.get("replicas", 0) for g in spec.get("workerGroupSpecs") or [])
        gpus = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"][
            "limits"].get("nvidia.com/gpu", 0)
        waiting = (f"Deployment 'vanilla' in application 'specserve' has 2 replicas that have "
                   f"taken more than 30s to be scheduled. This may be due to waiting for the "
                   f"cluster to auto-scale or for a runtime environment to be installed. "
                   f"Resources required for each replica: {{\"GPU\": {gpus or 1}}}")
        return {"rayClusterName": cluster,
                "rayClusterStatus": {"readyWorkerReplicas": 0, "desiredWorkerReplicas": workers},
                "applicationStatuses": {self.APP: {
                    "status": "DEPLOYING", "serveDeploymentStatuses": {
                        "router": {"status": "HEALTHY"},
                        "speculative": {"status": "UPDATING"},
                        "vanilla": {"status": "UPDATING", "message": waiting}}}}}

    def reconcile(self) -> None:
        """One pass: observe the RayService's generation and move status one step."""
        svc = self.api.get_namespaced_custom_object(*self._args("rayservices"), self.name)
        gen, status = svc["metadata"]["generation"], svc.get("status") or {}
        spec = svc["spec"]["rayClusterConfig"]
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName")
        pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName")
        goal = cluster_hash(spec)
        if active is None:  # first reconcile: the first cluster serves at once
            cluster = self._create_cluster(spec, ready=True)
            self._write(gen, self._serving(cluster, spec), None)
        elif self.clusters.get(active) == goal:  # goal is what runs: drop any pending cluster
            if pending or status.get("observedGeneration") != gen:
                self._write(gen, status["activeServiceStatus"], None)
        elif pending and self.clusters.get(pending) == goal:  # upgrading to the goal
            if self.new_cluster_serves:  # pending serves: traffic moves, it becomes active
                self._write(gen, self._serving(pending, spec), None)
        else:  # a new goal: prepare a pending cluster (replacing an outdated one)
            cluster = self._create_cluster(spec, ready=self.new_cluster_serves)
            state = self._serving if self.new_cluster_serves else self._stuck
            self._write(gen, status["activeServiceStatus"], state(cluster, spec))

    def _write(self, gen: int, active: dict, pending: dict | None) -> None:
        upgrading = pending is not None
        self._status("rayservices", self.name, {
            "observedGeneration": gen, "serviceStatus": "Running", "numServeEndpoints": 3,
            "activeServiceStatus": active, "pendingServiceStatus": pending,
            "conditions": [
                self._condition("Ready", True, "NonZeroServeEndpoints",
                                "Number of serve endpoints is greater than 0"),
                self._condition("UpgradeInProgress", upgrading,
                                "BothActivePendingClustersExist" if upgrading else
                                "NoPendingCluster",
                                f"Pending RayCluster {pending['rayClusterName']} is not ready"
                                if upgrading else "Active RayCluster exists and no pending "
                                "RayCluster")]})

    def start(self, period_s: float = 0.2) -> FakeKubeRay:
        def loop():
            while not self._stop.wait(period_s):
                try:
                    self.reconcile()
                except client.ApiException as e:
                    if e.status != 404:  # not created yet, or deleted
                        self.errors.append(e)
                except Exception as e:  # surfaced by stop()
                    self.errors.append(e)
                    return

        self._thread = threading.Thread(target=loop, name="fake-kuberay", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        if self.errors:
            raise self.errors[0]


def set_rayjob_status(api: client.ApiClient, namespace: str, name: str, **status) -> None:
    """Writes a RayJob's status as KubeRay would (jobDeploymentStatus, jobStatus, reason...)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "ray.io", "v1", namespace, "rayjobs", name, {"status": status},
        _content_type="application/merge-patch+json")
