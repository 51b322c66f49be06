"""API keys on the real FastAPI app of the ingress (router/ingress.py `build_fastapi_app`) with a
trivial endpoint behind it: 401 in OpenAI format without a valid key, /health open, keys never
logged, and the KubeRay manifests carry only a secretKeyRef."""

from __future__ import annotations

import logging

import pytest
import yaml
from fastapi.testclient import TestClient

from cluster.config import ConfigError, SpecserveConfig
from cluster.kuberay import MANIFESTS_DIR, rayservice
from router.auth import ApiKeys
from router.ingress import build_fastapi_app

KEYS = "sk-first-3f9a,sk-second-77c1"


def _client(monkeypatch, keys: str | None) -> TestClient:
    if keys is None:
        monkeypatch.delenv("TEST_SPECSERVE_KEYS", raising=False)
    else:
        monkeypatch.setenv("TEST_SPECSERVE_KEYS", keys)
    app = build_fastapi_app(4096, api_keys_env="TEST_SPECSERVE_KEYS")

    @app.post("/v1/completions")
    async def _completions():
        return {"ok": True}

    @app.get("/health")
    async def _health():
        return {"status": "ok"}

    return TestClient(app)


@pytest.mark.parametrize("header, status", [
    (None, 401),
    ("Bearer sk-wrong", 401),
    ("Bearer sk-first-3f9", 401),          # a prefix of a key
    ("Basic sk-first-3f9a", 401),          # right key, wrong scheme
    ("Bearer sk-first-3f9a", 200),
    ("bearer  sk-second-77c1 ", 200),
])
def test_bearer_keys(monkeypatch, caplog, header, status):
    client = _client(monkeypatch, KEYS)
    headers = {"authorization": header} if header else {}
    with caplog.at_level(logging.DEBUG):
        r = client.post("/v1/completions", json={}, headers=headers)
    assert r.status_code == status
    if status == 401:
        assert r.json()["error"]["code"] == 401
        assert r.json()["error"]["type"] == "AuthenticationError"
        assert r.headers["www-authenticate"] == "Bearer"
    assert "sk-first-3f9a" not in caplog.text and "sk-second-77c1" not in caplog.text


def test_health_needs_no_key(monkeypatch):
    assert _client(monkeypatch, KEYS).get("/health").status_code == 200


def test_unset_keys_fail_closed(monkeypatch):
    client = _client(monkeypatch, None)
    r = client.post("/v1/completions", json={}, headers={"authorization": "Bearer anything"})
    assert r.status_code == 401
    with pytest.raises(ValueError, match="TEST_SPECSERVE_KEYS"):
        ApiKeys.from_env("TEST_SPECSERVE_KEYS")


def test_oversized_body_still_413_with_a_key(monkeypatch):
    r = _client(monkeypatch, KEYS).post("/v1/completions", content=b"x" * 5000,
                                        headers={"authorization": "Bearer sk-first-3f9a"})
    assert r.status_code == 413


def test_manifests_take_keys_from_a_secret_only():
    text = (MANIFESTS_DIR / "ray-service.gpu.yaml").read_text()
    obj = yaml.safe_load(text)
    cluster = obj["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for pod in pods:
        env = pod["template"]["spec"]["containers"][0]["env"]
        keys = [e for e in env if e["name"] == "SPECSERVE_API_KEYS"]
        assert keys == [{"name": "SPECSERVE_API_KEYS", "valueFrom": {"secretKeyRef": {
            "name": "specserve-api-keys", "key": "api-keys"}}}]
    assert "api_keys_env: SPECSERVE_API_KEYS" in obj["spec"]["serveConfigV2"]


def test_keys_without_a_secret_are_refused_at_render():
    data = yaml.safe_load((MANIFESTS_DIR / "configs" / "gpu.yaml").read_text())
    del data["kubernetes"]["api_keys_secret"]
    with pytest.raises(ConfigError, match="kubernetes.api_keys_secret"):
        rayservice(SpecserveConfig.from_dict(data))


@pytest.mark.parametrize("method, path, status, kind", [
    ("get", "/v1/nowhere", 404, "NotFoundError"),
    ("get", "/v1/completions", 405, "MethodNotAllowed"),  # POST only
])
def test_routing_errors_are_openai_json(monkeypatch, method, path, status, kind):
    r = getattr(_client(monkeypatch, KEYS), method)(
        path, headers={"authorization": "Bearer sk-first-3f9a"})
    assert r.status_code == status
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == (kind, None, status) and err["message"]
