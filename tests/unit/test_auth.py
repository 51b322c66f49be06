"""API keys as pure functions (router/auth.py: `ApiKeys`, `access`, `route_path`) and in the
rendered KubeRay manifests (only secretKeyRefs). The HTTP behaviour is tested on the deployed
application in tests/e2e/test_security.py."""

from __future__ import annotations

import logging

import pytest
import yaml

from core import ConfigError, SpecserveConfig
from cluster.kube.render import MANIFESTS_DIR, rayservice
from router.auth import ApiKeys, access, route_path

KEYS = ApiKeys(["sk-first-3f9a", "sk-second-77c1"])
ADMIN = ApiKeys(["sk-admin-0d2e"])


@pytest.mark.parametrize("header, allowed", [
    (None, False),
    ("", False),
    ("Bearer sk-wrong", False),
    ("Bearer sk-first-3f9", False),          # a prefix of a key
    ("Bearer sk-first-3f9ab", False),        # a key plus one character
    ("Basic sk-first-3f9a", False),          # right key, wrong scheme
    ("sk-first-3f9a", False),                # no scheme
    ("Bearer sk-first-3f9a", True),
    ("bearer  sk-second-77c1 ", True),
])
def test_bearer_keys(header, allowed):
    assert KEYS.allows(header) is allowed


def test_unset_or_empty_keys_fail_closed(monkeypatch, caplog):
    monkeypatch.delenv("TEST_SPECSERVE_KEYS", raising=False)
    with pytest.raises(ValueError, match="server.admin_api_keys_env: environment variable "
                                         "TEST_SPECSERVE_KEYS is unset"):
        ApiKeys.from_env("TEST_SPECSERVE_KEYS", "server.admin_api_keys_env")
    monkeypatch.setenv("TEST_SPECSERVE_KEYS", " , ")
    with pytest.raises(ValueError, match="TEST_SPECSERVE_KEYS"):
        ApiKeys.from_env("TEST_SPECSERVE_KEYS")
    assert not ApiKeys([]).allows("Bearer ")
    monkeypatch.setenv("TEST_SPECSERVE_KEYS", "sk-a, sk-b")
    with caplog.at_level(logging.DEBUG):
        assert ApiKeys.from_env("TEST_SPECSERVE_KEYS").allows("Bearer sk-b")
    assert "sk-a" not in caplog.text and "sk-b" not in caplog.text


INFERENCE, ADMIN_KEY, WRONG = "Bearer sk-first-3f9a", "Bearer sk-admin-0d2e", "Bearer sk-nope"


@pytest.mark.parametrize("path, header, keys, admin, status", [
    ("/health", None, KEYS, ADMIN, 200),                 # probes carry no key
    ("/v1/completions", None, KEYS, ADMIN, 401),
    ("/v1/completions", WRONG, KEYS, ADMIN, 401),
    ("/v1/completions", INFERENCE, KEYS, ADMIN, 200),
    ("/v1/completions", ADMIN_KEY, KEYS, ADMIN, 200),    # an admin key opens every endpoint
    ("/metrics", INFERENCE, KEYS, ADMIN, 200),
    ("/admin/policy", INFERENCE, KEYS, ADMIN, 403),      # an inference key cannot re-route
    ("/admin/policy", WRONG, KEYS, ADMIN, 401),
    ("/admin/policy", None, KEYS, ADMIN, 401),
    ("/admin/policy", ADMIN_KEY, KEYS, ADMIN, 200),
    ("/admin", INFERENCE, KEYS, ADMIN, 403),
    ("/administrator", INFERENCE, KEYS, ADMIN, 200),     # not under /admin/
    ("/admin/policy", INFERENCE, KEYS, None, 200),       # no admin keys: the inference keys
    ("/admin/policy", None, None, ADMIN, 401),           # admin keys only: /admin/* guarded,
    ("/v1/models", None, None, ADMIN, 200),              # the rest open
    ("/v1/models", None, None, None, 200),
])
def test_access(path, header, keys, admin, status):
    assert access(path, header, keys, admin) == status


@pytest.mark.parametrize("path, root, expected", [
    ("/admin/policy", "", "/admin/policy"),
    ("/keyed/admin/policy", "/keyed", "/admin/policy"),   # Serve's route_prefix is root_path
    ("/keyed/health", "/keyed", "/health"),
    ("/keyed", "/keyed", "/"),
    ("/keyedx/admin", "/keyed", "/keyedx/admin"),         # not below the prefix
])
def test_route_path(path, root, expected):
    assert route_path({"path": path, "root_path": root}) == expected


def test_manifests_take_keys_from_a_secret_only():
    text = (MANIFESTS_DIR / "ray-service.gpu.yaml").read_text()
    obj = yaml.safe_load(text)
    cluster = obj["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for pod in pods:
        env = pod["template"]["spec"]["containers"][0]["env"]
        keys = [e for e in env if "API_KEYS" in e["name"]]
        assert keys == [
            {"name": "SPECSERVE_API_KEYS", "valueFrom": {"secretKeyRef": {
                "name": "specserve-api-keys", "key": "api-keys"}}},
            {"name": "SPECSERVE_ADMIN_API_KEYS", "valueFrom": {"secretKeyRef": {
                "name": "specserve-api-keys", "key": "admin-api-keys"}}}]
    assert "api_keys_env: SPECSERVE_API_KEYS" in obj["spec"]["serveConfigV2"]
    assert "admin_api_keys_env: SPECSERVE_ADMIN_API_KEYS" in obj["spec"]["serveConfigV2"]


@pytest.mark.parametrize("field", ["api_keys_env", "admin_api_keys_env"])
def test_keys_without_a_secret_are_refused_at_render(field):
    data = yaml.safe_load((MANIFESTS_DIR / "configs" / "gpu.yaml").read_text())
    del data["kubernetes"]["api_keys_secret"]
    data["server"] = {"port": 8000, field: "SOME_KEYS"}
    with pytest.raises(ConfigError, match=f"kubernetes.api_keys_secret: required when "
                                          f"server.{field} is set"):
        rayservice(SpecserveConfig.from_dict(data))
