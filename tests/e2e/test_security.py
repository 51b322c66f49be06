"""The security checks on a deployed application with API keys on, built through the product's
own path (`deployments.app.build_app_from_config`, as `specserve serve` and the RayService do) and
served under a route prefix next to the session's application.

The application: one vanilla replica (the speculative pool at 0 replicas), inference and admin
keys from the Ray processes' environment (tests/session_app.py `TEST_API_KEYS`), a body limit of
1 MiB, 8 sequences in flight per replica and per request, and capture on (to a temporary folder)
except for the requests of one inference key.
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from core import DEFAULT_CONFIG_PATH, SpecserveConfig
from tests.session_app import TEST_PORT

pytestmark = pytest.mark.serve

PREFIX = "/keyed"
APP_NAME = "specserve-keyed"
MODEL = "specserve-tiny"
KEY = "Bearer sk-test-inference-2"
NO_CAPTURE_KEY = "Bearer sk-test-inference-1"  # tests/session_app.py SPECSERVE_TEST_NO_CAPTURE_KEYS
ADMIN = "Bearer sk-test-admin"
MAX_BODY_BYTES = 1 << 20
MAX_SEQUENCES = 8
CHAT = [{"role": "user", "content": "hello"}]
CODE = ["def fibonacci(n):\n    ", "import os\n", "class Stack:\n", "for i in range(10):\n"]
ENDPOINTS = [  # (method, path, body)
    ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1}),
    ("POST", "/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 1}),
    ("GET", "/v1/models", None),
    ("GET", "/metrics", None),
    ("GET", "/admin/policy", None),
    ("PUT", "/admin/policy", {"pin": "vanilla"}),
    ("GET", "/admin/speedup", None),
    ("GET", "/admin/step_samples", None),
    ("GET", "/admin/speculators", None),
]
ADMIN_ENDPOINTS = [e for e in ENDPOINTS if e[1].startswith("/admin/")]


@pytest.fixture(scope="module")
def capture_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("capture"))


@pytest.fixture(scope="module")
def keyed_config(lab, capture_dir) -> SpecserveConfig:
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    data["vanilla"] |= {"enforce_eager": True, "profile_max_batch": 0}  # up in seconds
    data["speculative"]["num_replicas"] = 0
    data["server"] |= {"port": TEST_PORT, "api_keys_env": "SPECSERVE_TEST_API_KEYS",
                       "admin_api_keys_env": "SPECSERVE_TEST_ADMIN_KEYS",
                       "max_body_bytes": MAX_BODY_BYTES, "max_in_flight_per_replica": MAX_SEQUENCES,
                       "max_sequences_per_request": MAX_SEQUENCES}
    data["capture"] = {"enabled": True, "uri": capture_dir, "flush_interval_s": 0.5,
                       "excluded_api_keys_env": "SPECSERVE_TEST_NO_CAPTURE_KEYS"}
    return SpecserveConfig.from_dict(data)


@pytest.fixture(scope="module")
def keyed(serve_instance, keyed_config) -> str:
    """Base URL of the keyed application (route prefix included)."""
    from ray import serve

    from deployments.app import build_app_from_config

    serve.run(build_app_from_config(keyed_config), name=APP_NAME, route_prefix=PREFIX)
    yield serve_instance + PREFIX
    serve.delete(APP_NAME)


@pytest.fixture
def client(keyed) -> httpx.Client:
    """A client without a key, once the vanilla pool has a live replica."""
    with httpx.Client(base_url=keyed, timeout=120) as c:
        deadline = time.monotonic() + 300
        while c.get("/health").json()["pools"]["vanilla"]["replicas"] == 0:
            assert time.monotonic() < deadline, "no live vanilla replica after 300 s"
            time.sleep(1)
        yield c


def _call(client, method, path, body=None, authorization=None, **kw) -> httpx.Response:
    headers = {"authorization": authorization} if authorization else {}
    return client.request(method, path, json=body, headers=headers, **kw)


def _error(r: httpx.Response, status: int, kind: str, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert (err["code"], err["type"]) == (status, kind) and err["message"], err
    if param is not None:
        assert err["param"] == param, err
    return err


# --- 1. API keys -----------------------------------------------------------------------------

@pytest.mark.parametrize("authorization", [None, "Bearer sk-wrong", "Bearer sk-test-inference-1x",
                                           "Basic sk-test-inference-1", "sk-test-inference-1"])
@pytest.mark.parametrize("method, path, body", ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS])
def test_no_or_a_wrong_key_gets_401(client, method, path, body, authorization):
    r = _call(client, method, path, body, authorization)
    _error(r, 401, "AuthenticationError")
    assert r.headers["www-authenticate"] == "Bearer"


def test_health_needs_no_key(client):
    r = client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


@pytest.mark.parametrize("method, path, body", ADMIN_ENDPOINTS,
                         ids=[f"{m} {p}" for m, p, _ in ADMIN_ENDPOINTS])
def test_an_inference_key_cannot_use_admin(client, method, path, body):
    _error(_call(client, method, path, body, KEY), 403, "PermissionDeniedError")
    assert _call(client, "GET", "/admin/policy", authorization=ADMIN).json()["pin"] == "auto"


def test_the_right_keys_work(client):
    r = _call(client, *ENDPOINTS[0], KEY)
    assert r.status_code == 200 and len(r.json()["choices"]) == 1, r.text
    assert _call(client, *ENDPOINTS[1], KEY).status_code == 200
    models = _call(client, "GET", "/v1/models", None, KEY).json()["data"]
    assert [m["id"] for m in models] == [MODEL]
    assert "specserve_" in _call(client, "GET", "/metrics", None, KEY).text
    assert _call(client, "GET", "/v1/models", None, ADMIN).status_code == 200  # admin: everywhere
    r = _call(client, "PUT", "/admin/policy", {"pin": "vanilla"}, ADMIN)
    assert r.status_code == 200 and r.json()["pin"] == "vanilla", r.text
    assert _call(client, "PUT", "/admin/policy", {"pin": None}, ADMIN).json()["pin"] == "auto"
    assert "tasks" in _call(client, "GET", "/admin/speedup", None, ADMIN).json()


# --- 2. The body limit on the bytes received ---------------------------------------------------

def _chunks(total: int, size: int = 64 << 10):
    """A body httpx sends with `Transfer-Encoding: chunked` (a generator has no length)."""
    yield b'{"model": "' + MODEL.encode() + b'", "prompt": "'
    for _ in range(total // size):
        yield b"x" * size
    yield b'"}'


def test_a_chunked_body_above_the_limit_gets_413(client):
    r = client.post("/v1/completions", content=_chunks(5 << 20),
                    headers={"authorization": KEY, "content-type": "application/json"})
    err = _error(r, 413, "RequestEntityTooLarge")
    assert str(MAX_BODY_BYTES) in err["message"]


def test_a_chunked_body_within_the_limit_is_served(client):
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1}).encode()
    r = client.post("/v1/completions", content=iter([body[:10], body[10:]]),
                    headers={"authorization": KEY, "content-type": "application/json"})
    assert r.status_code == 200, r.text


def _raw(base_url: str, head: str, body: bytes, timeout_s: float = 60) -> bytes:
    """Sends a hand-written HTTP/1.1 request; returns what the server answered before closing."""
    url = urlsplit(base_url)
    with socket.create_connection((url.hostname, url.port), timeout=timeout_s) as s:
        s.sendall(head.encode() + b"\r\n\r\n")
        try:
            s.sendall(body)
        except OSError:  # the server answered and closed before taking it all
            pass
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and b'"code"' in out:
                break
        return out


def test_a_declared_length_above_the_limit_gets_413_before_the_body(keyed):
    head = (f"POST {PREFIX}/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {5 << 20}")
    out = _raw(keyed, head, b'{"model": "x"}')  # 14 bytes of the 5 MiB declared
    assert out.startswith(b"HTTP/1.1 413"), out[:200]
    assert b"RequestEntityTooLarge" in out


def test_a_declared_length_below_the_body_reads_only_that_length(keyed, client):
    body = json.dumps({"model": MODEL, "prompt": "x" * (5 << 20)}).encode()
    head = (f"POST {PREFIX}/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 100")
    out = _raw(keyed, head, body)
    # The server frames the body by the declared length: the app gets 100 bytes (an unterminated
    # JSON string), and the rest is no HTTP request. Seen: uvicorn answers "Invalid HTTP request
    # received." and closes, before the app's own 400; never a model lookup, a 200 or a hang.
    assert out.startswith(b"HTTP/1.1 400"), out[:300]
    assert b"Invalid HTTP request" in out or b"not valid JSON" in out, out[:300]
    assert client.get("/health").status_code == 200


# --- 3. Work per request -------------------------------------------------------------------

@pytest.mark.parametrize("prompt, n", [
    (["x"] * (MAX_SEQUENCES + 1), 1),
    (["x"] * 3, 3),
    ([[1, 2]] * (MAX_SEQUENCES + 1), 1),
    (["x"] * 1000, 2),
])
def test_sequences_per_request_are_capped(client, prompt, n):
    r = _call(client, "POST", "/v1/completions",
              {"model": MODEL, "prompt": prompt, "n": n, "max_tokens": 1}, KEY)
    err = _error(r, 400, "BadRequestError", "prompt")
    assert f"{len(prompt) * n} sequences" in err["message"] and f"at most {MAX_SEQUENCES}" in \
        err["message"]


def test_a_request_at_the_cap_is_served(client):
    r = _call(client, "POST", "/v1/completions",
              {"model": MODEL, "prompt": CODE, "n": 2, "max_tokens": 1, "temperature": 0.8}, KEY)
    assert r.status_code == 200 and len(r.json()["choices"]) == 8, r.text


def test_admission_counts_sequences_not_requests(client):
    long = {"model": MODEL, "prompt": CODE, "n": 2, "max_tokens": 900, "temperature": 0.8,
            "seed": 1, "ignore_eos": True, "stream": True, "route": "vanilla"}  # counted there
    with client.stream("POST", "/v1/completions", json=long,
                       headers={"authorization": KEY}) as stream:
        assert stream.status_code == 200, stream.read()
        lines = stream.iter_lines()
        first = next(line for line in lines if line)  # the stream runs: 8 sequences in flight
        assert json.loads(first[6:])["choices"], first
        seen = [client.get("/health").json()["pools"]["vanilla"]["in_flight"]]
        while seen[-1] != MAX_SEQUENCES and len(seen) < 10:  # the board's view: 0.5 s pushes
            time.sleep(0.3)
            seen.append(client.get("/health").json()["pools"]["vanilla"]["in_flight"])
        assert seen[-1] == MAX_SEQUENCES, (first, seen)
        r = _call(client, "POST", "/v1/completions",
                  {"model": MODEL, "prompt": "x", "max_tokens": 1}, KEY)
        _error(r, 429, "RateLimitError")
        assert r.headers["retry-after"] == "1"
    deadline = time.monotonic() + 30  # the closed stream is aborted and released
    while client.get("/health").json()["pools"]["vanilla"]["in_flight"]:
        assert time.monotonic() < deadline, "the closed stream stayed counted"
        time.sleep(0.2)
    assert _call(client, *ENDPOINTS[0], KEY).status_code == 200


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1}),
    ("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 1}),
])
def test_stop_takes_at_most_4_strings(client, path, body):
    r = _call(client, "POST", path, {**body, "stop": ["a", "b", "c", "d", "e"]}, KEY)
    err = _error(r, 400, "BadRequestError", "stop")
    assert err["message"].startswith("stop: ") and "at most 4" in err["message"]
    assert _call(client, "POST", path, {**body, "stop": ["a", "b", "c", "d"]}, KEY).status_code \
        == 200


# --- 4. Token ids ----------------------------------------------------------------------------

@pytest.mark.parametrize("prompt, where", [([1, -2], "prompt[1]"), ([[1, 2], [-1]], "prompt[1][0]"),
                                           ([-7], "prompt[0]")])
def test_negative_token_ids_get_400_naming_prompt(client, prompt, where):
    r = _call(client, "POST", "/v1/completions",
              {"model": MODEL, "prompt": prompt, "max_tokens": 1}, KEY)
    err = _error(r, 400, "BadRequestError", "prompt")
    assert err["message"].startswith(f"{where}: ") and "greater than or equal to 0" in \
        err["message"], err


# --- 8. Usage chunks only for a client that asked --------------------------------------------

@pytest.mark.parametrize("include_usage", [False, True])
def test_a_stream_carries_usage_only_when_asked(client, include_usage):
    body = {"model": MODEL, "prompt": CODE[0], "max_tokens": 3, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    with client.stream("POST", "/v1/completions", json=body,
                       headers={"authorization": KEY}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    usage = [c for c in chunks if c.get("choices") == []]
    assert len(usage) == (1 if include_usage else 0), chunks
    assert sum(len(c["choices"]) for c in chunks) >= 1


# --- Capture (issue 32): recorded for allowed keys only, token ids as served -------------------

def _captured(capture_dir: str, marker: str, tokenizer, rows: int = 1, wait_s: float = 30):
    """Captured rows whose prompt decodes to text containing `marker`, once there are `rows`."""
    from core.capture_store import read_capture
    deadline = time.monotonic() + wait_s
    while True:
        found = [r for r in read_capture(capture_dir).to_pylist()
                 if marker in tokenizer.decode(r["prompt_token_ids"])]
        if len(found) >= rows or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_capture_records_served_token_ids_for_allowed_keys_only(client, capture_dir, lab):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(f"{lab}/target")
    body = {"model": MODEL, "max_tokens": 12, "temperature": 0}
    kept = _call(client, "POST", "/v1/completions",
                 {**body, "prompt": "# capture-kept\ndef area(r):"}, KEY)
    assert kept.status_code == 200, kept.text
    # An excluded key's request is never recorded, even when it marks itself for capture.
    dropped = _call(client, "POST", "/v1/completions",
                    {**body, "prompt": "# capture-excluded\ndef area(r):",
                     "vllm_xargs": {"specserve_capture": 1, "specserve_task": "code"}},
                    NO_CAPTURE_KEY)
    assert dropped.status_code == 200, dropped.text
    with client.stream("POST", "/v1/chat/completions", headers={"authorization": KEY},
                       json={**body, "stream": True, "messages": [
                           {"role": "user", "content": "capture-stream: list three colors"}]}) as r:
        assert r.status_code == 200
        streamed = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                           for line in r.iter_lines()
                           if line.startswith("data: {") and json.loads(line[6:])["choices"])
    row = _captured(capture_dir, "capture-kept", tokenizer)
    assert len(row) == 1, row
    row, usage = row[0], kept.json()["usage"]
    assert len(row["prompt_token_ids"]) == usage["prompt_tokens"]
    assert len(row["output_token_ids"]) == usage["completion_tokens"]
    assert tokenizer.decode(row["output_token_ids"]) == kept.json()["choices"][0]["text"]
    assert (row["pool"], row["task"], row["temperature"], row["finish_reason"]) == (
        "vanilla", kept.headers["x-specserve-task"], 0.0,
        kept.json()["choices"][0]["finish_reason"])
    chat = _captured(capture_dir, "capture-stream", tokenizer)
    assert len(chat) == 1 and tokenizer.decode(chat[0]["output_token_ids"],
                                               skip_special_tokens=True) == streamed
    assert _captured(capture_dir, "capture-excluded", tokenizer, wait_s=2) == []
    deadline = time.monotonic() + 15  # the replica's counts reach the router with its stats push
    while (written := _capture_rows(_call(client, "GET", "/metrics", None, KEY).text)) < 2:
        assert time.monotonic() < deadline, f"specserve_capture_rows_total written: {written}"
        time.sleep(1)


def _capture_rows(metrics: str, outcome: str = "written") -> float:
    from prometheus_client.parser import text_string_to_metric_families
    return sum(s.value for f in text_string_to_metric_families(metrics)
               if f.name == "specserve_capture_rows" for s in f.samples
               if s.labels == {"pool": "vanilla", "outcome": outcome})
