"""Fixtures for the KubeRay tests: one real API server per session, a fresh namespace per test
(taken by tests/integration/conftest.py), and the CRDs' JSON Schemas (tests/unit/conftest.py).

Without the API server, etcd or the CRDs the tests that need them skip, saying what is missing and
how to get it (tests/kubeapi.py).
"""

from __future__ import annotations

import re
import secrets

import pytest
from kubernetes import client

from kubeapi import ApiServer, CRD_FILES, apiserver_missing, crd_json_schema, crds_dir, \
    crds_missing


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory) -> ApiServer:
    """etcd + kube-apiserver on 127.0.0.1 with the KubeRay CRDs installed (~10 s to start)."""
    reason = apiserver_missing()
    if reason:
        pytest.skip(reason)
    server = ApiServer(tmp_path_factory.mktemp("kube-apiserver")).start()
    try:
        server.install_crds()
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_ns(kube_api, request) -> str:
    """A new namespace for this test (never deleted: nothing here finalizes namespaces)."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{secrets.token_hex(2)}"
    client.CoreV1Api(kube_api.api_client()).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture(scope="session")
def crd_schemas() -> dict[str, dict]:
    """{kind: JSON Schema} from the original KubeRay v1.7.0 CRDs."""
    reason = crds_missing()
    if reason:
        pytest.skip(reason)
    kinds = {"ray.io_rayclusters.yaml": "RayCluster", "ray.io_rayjobs.yaml": "RayJob",
             "ray.io_rayservices.yaml": "RayService"}
    return {kinds[f]: crd_json_schema(crds_dir() / f) for f in CRD_FILES}
