"""End to end through HTTP on real pools (../shared/cases #1, #2, #3, #5, #10)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from router.errors import UNSUPPORTED_MEDIA_TYPE
from tests.local_ray import until

pytestmark = pytest.mark.serve

MODEL = "specserve-tiny"
CODE = "def fibonacci(n):\n    "
PROSE = "The history of the city begins"
ROUTES = ["vanilla", "speculative"]


def complete(client, route="auto", **body):
    r = client.post("/v1/completions", json={"model": MODEL, "temperature": 0, "route": route,
                                              **body})
    assert r.status_code == 200, r.text
    return r


def stream_text(client, path, body) -> tuple[str, list[dict]]:
    """Concatenated deltas and the parsed chunks of an SSE response."""
    chunks = []
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    if path.endswith("/chat/completions"):
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    else:
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    return text, chunks


def test_the_speedup_model_answers_at_a_temperature_and_refuses_a_bad_one(client):
    assert until(lambda: client.get("/admin/speedup").json()["tasks"]["code"]["curve"], 30, 0.5)
    greedy, hot = (client.get("/admin/speedup", params={"temperature": t}).json()
                   for t in (0, 1.0))
    assert (greedy["temperature"], hot["temperature"]) == (0.0, 1.0)
    # the pools' measured slowdown beside each other, and the allocation: off by default, split
    sharing = greedy["host_sharing"]
    assert set(sharing) == {"slowdown", "allocation", "predicted_tokens_per_s",
                            "speculative_share", "mix_expected_tokens"}, sharing
    assert (sharing["allocation"], sharing["predicted_tokens_per_s"]) == ("split", {}), sharing
    for task in ("code", "creative"):  # the same batches; E[τ] from that temperature's counts
        batches = [[r["batch"] for r in c["tasks"][task]["curve"]] for c in (greedy, hot)]
        assert batches[0] == batches[1] and batches[0], batches
        t = greedy["tasks"][task]  # "up to B" means every batch 1..B pays
        paying = [r["batch"] for r in t["curve"] if r["speedup"] >= greedy["min_speedup"]]
        assert t["pays_at_batches"] == paying, t
        assert all(b in paying for b in batches[0] if b <= t["pays_up_to_batch"]), t
    for bad in ("hot", "-0.5", "2.5", "nan"):
        r = client.get("/admin/speedup", params={"temperature": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "temperature", r.text


def test_each_pool_measured_its_context_cost_and_the_curve_prices_a_context(client):
    """Both pools' replicas ran the long-prompt decode window at start (deployments/profile.py):
    a step reads more KV at a longer context, so the curve at 900 tokens per sequence has every
    pool's step time at least that at the profile's context, more at the largest batch."""
    assert until(lambda: client.get("/admin/speedup").json()["tasks"]["code"]["curve"], 30, 0.5)
    short = client.get("/admin/speedup").json()
    costs = short["context_cost"]
    assert set(costs) == {"vanilla", "speculative"}, costs
    for pool, cost in costs.items():  # measured (the profile context), κ ≥ 0
        assert cost["context_s_per_token"] >= 0 and 0 < cost["profile_context"] < 200, (pool, cost)
    # on this target a vanilla step at batch 8 gains ~6 ms of 8.6 at 900 tokens of context
    # (0.86 µs per sequence per token); the n-gram pool's verification measured ~0 (2026-12-05)
    costly = max(costs, key=lambda p: costs[p]["context_s_per_token"])
    assert costs[costly]["context_s_per_token"] > 0, costs
    long = client.get("/admin/speedup", params={"context": 900}).json()
    assert (short["context"], long["context"]) == (None, 900.0)
    rows = [(a, b) for a, b in zip(short["tasks"]["code"]["curve"], long["tasks"]["code"]["curve"])]
    for a, b in rows:
        assert a["batch"] == b["batch"]
        for step in ("vanilla_step_ms", "speculative_step_ms"):
            assert b[step] >= a[step], (a, b)
    top_short, top_long = rows[-1]
    assert top_long[f"{costly}_step_ms"] > top_short[f"{costly}_step_ms"], rows[-1]
    for bad in ("-1", "many", "inf"):
        r = client.get("/admin/speedup", params={"context": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "context", r.text


def test_step_samples_show_what_set_each_pools_step_times(client):
    """GET /admin/step_samples: the samples the router folded into its step-time models after
    `since`, each with the divisor it was folded with; a bad `since` is a 400 naming it."""
    since = time.time()
    with ThreadPoolExecutor(8) as pool:  # both engines busy over several half-second windows
        list(pool.map(lambda i: complete(client, ROUTES[i % 2], prompt=f"{CODE}# {i}\n",
                                         max_tokens=120, ignore_eos=True), range(16)))
    samples = until(lambda: client.get("/admin/step_samples", params={"since": since}
                                       ).json()["samples"], 30, 0.5)
    for s in samples:
        assert s["time"] > since and s["pool"] in ROUTES and s["batch"] > 0, s
        assert s["step_ms"] > 0 and isinstance(s["other_busy"], bool), s
        divisor = s["slowdown"] or 1.0
        assert s["folded_ms"] == pytest.approx(s["step_ms"] / divisor, rel=1e-3, abs=1e-3), s
    newest = samples[-1]["time"]
    later = client.get("/admin/step_samples", params={"since": newest}).json()["samples"]
    assert all(s["time"] > newest for s in later), later
    for bad in ("yesterday", "nan", "inf"):
        r = client.get("/admin/step_samples", params={"since": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "since", r.text


def test_reset_prefix_cache_drops_every_engines_cache_but_not_a_running_request(client):
    """POST /admin/reset_prefix_cache asks every replica's vLLM engine to drop its prefix cache
    (`bench.run` calls it before each cell): 200 with every replica reset when idle; while a
    request holds KV blocks vLLM refuses, the answer is a 409 naming that pool, and the request
    runs to its end untouched."""
    assert until(lambda: client.post("/admin/reset_prefix_cache").status_code == 200, 30, 0.5)
    r = client.post("/admin/reset_prefix_cache")
    assert r.status_code == 200, r.text
    pools = r.json()["pools"]
    assert set(pools) == {"vanilla", "speculative"}, pools
    for pool, answer in pools.items():
        assert answer["replicas"] >= 1 and answer["reset"] == answer["replicas"], (pool, answer)
    body = {"model": MODEL, "prompt": PROSE, "max_tokens": 300, "temperature": 0,
            "ignore_eos": True, "route": "vanilla", "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as s:
        assert s.status_code == 200
        lines = s.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        busy = client.post("/admin/reset_prefix_cache")
        rest = list(lines)
    assert json.loads(first[6:])["choices"], first
    assert busy.status_code == 409, busy.text
    error = busy.json()["error"]
    assert error["code"] == 409 and error["message"].startswith("vanilla pool"), error
    assert [line for line in rest if line][-1] == "data: [DONE]", rest[-3:]
    assert until(lambda: client.post("/admin/reset_prefix_cache").status_code == 200, 30, 0.5)


def test_auto_decisions_explain_themselves(client):
    # both pools profile their step times at start; the router folds the StatsBoard's view in
    # every 0.5 s, so a request sent the moment the last pool came up may not see it yet
    assert until(lambda: client.get("/admin/speedup").json()["tasks"]["code"]["curve"], 30, 0.5)
    for prompt, task in ((CODE, "code"), ("Hi! How are you today?", "chat")):
        r = complete(client, prompt=prompt, max_tokens=8)
        route, reason = r.headers["x-specserve-route"], r.headers["x-specserve-reason"]
        assert r.headers["x-specserve-task"] == task
        # the pools profile their step times at start, so the measured speedup decides
        assert reason in ("speculation_pays", "speculation_costs")
        speedup = float(r.headers["x-specserve-speedup"])
        print(f"{task}: {route} ({reason}), S {speedup}")
        assert (route == "speculative") == (reason == "speculation_pays")
        # the header rounds S to 2 decimals: an S just under min_speedup 1.1 reads "1.10"
        assert (speedup >= 1.05) if route == "speculative" else (speedup <= 1.1), (task, speedup)


@pytest.mark.parametrize("route", ROUTES)
def test_requested_route_is_obeyed(client, route):
    r = complete(client, route=route, prompt=PROSE, max_tokens=4)
    assert (r.headers["x-specserve-route"], r.headers["x-specserve-reason"]) == (route, "requested")


@pytest.mark.parametrize("prompt", [CODE, PROSE, "import os\nimport sys\n\n\ndef main(argv):\n"])
def test_greedy_output_is_lossless(client, prompt):
    texts = {route: complete(client, route, prompt=prompt, max_tokens=64).json()["choices"][0]
             ["text"] for route in ROUTES}
    assert texts["speculative"] == texts["vanilla"]
    assert len(texts["vanilla"]) > 0


@pytest.mark.parametrize("route", ROUTES)
def test_stream_concatenates_to_non_stream_completions(client, route):
    body = {"model": MODEL, "prompt": CODE, "max_tokens": 64, "temperature": 0, "route": route}
    whole = client.post("/v1/completions", json=body).json()["choices"][0]
    text, chunks = stream_text(client, "/v1/completions", body)
    assert text == whole["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == \
        whole["finish_reason"]


@pytest.mark.parametrize("route", ROUTES)
def test_stream_concatenates_to_non_stream_chat(client, route):
    body = {"model": MODEL, "max_tokens": 48, "temperature": 0, "route": route,
            "messages": [{"role": "user", "content": "Write a Python function that adds."}]}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-specserve-route"] == route
    whole = r.json()["choices"][0]
    text, chunks = stream_text(client, "/v1/chat/completions", body)
    assert text == whole["message"]["content"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == \
        whole["finish_reason"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("max_tokens", [1, 2, 3])  # 3 = k - 1 for k = 4
def test_max_tokens_below_k(client, route, max_tokens):
    body = complete(client, route, prompt=CODE, max_tokens=max_tokens).json()
    assert body["usage"]["completion_tokens"] == max_tokens
    assert body["choices"][0]["finish_reason"] == "length"


def test_one_token_goes_vanilla_with_its_reason_and_the_same_token(client):
    """`max_tokens` 1: the prefill samples the token, no draft is ever verified, so `auto` sends
    it vanilla (`no_decode_step`), completions and chat alike; forced, it still runs speculative."""
    auto = complete(client, prompt=CODE, max_tokens=1)
    assert (auto.headers["x-specserve-route"], auto.headers["x-specserve-reason"]) == \
        ("vanilla", "no_decode_step")
    forced = complete(client, "speculative", prompt=CODE, max_tokens=1)
    assert forced.headers["x-specserve-route"] == "speculative"
    assert forced.json()["choices"][0]["text"] == auto.json()["choices"][0]["text"]
    chat = client.post("/v1/chat/completions", json={
        "model": MODEL, "temperature": 0, "max_completion_tokens": 1,
        "messages": [{"role": "user", "content": "Write a function that adds two numbers."}]})
    assert chat.status_code == 200, chat.text
    assert chat.headers["x-specserve-reason"] == "no_decode_step"
    assert chat.json()["usage"]["completion_tokens"] == 1


def test_stop_string_on_the_speculative_path(client):
    full = complete(client, "speculative", prompt=CODE, max_tokens=48).json()["choices"][0]["text"]
    stop = full[len(full) // 2: len(full) // 2 + 3]
    head = full[:full.index(stop)]
    for stream in (False, True):
        body = {"model": MODEL, "prompt": CODE, "max_tokens": 48, "temperature": 0,
                "route": "speculative", "stop": [stop]}
        if stream:
            text, chunks = stream_text(client, "/v1/completions", body)
            finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
        else:
            choice = client.post("/v1/completions", json=body).json()["choices"][0]
            text, finish = choice["text"], choice["finish_reason"]
        assert (text, finish) == (head, "stop")


def test_stop_token_ids_end_both_paths_at_the_same_token(client):
    """../shared/cases #2 with `stop_token_ids`: a token from the middle of the greedy
    continuation, as a stop token, ends the completion at its first occurrence on both paths,
    although the speculative pool may accept it inside a draft block with tokens after it: the
    same text (without the stop token), token ids up to and including it, `stop_reason` naming
    it, and usage counting no token past it, streamed or not."""
    ids = complete(client, "vanilla", prompt=CODE, max_tokens=48,
                   return_token_ids=True).json()["choices"][0]["token_ids"]
    assert len(ids) == 48, ids
    # from the middle on, the first token that does not also open the continuation
    stop_id = next(t for t in ids[len(ids) // 2:] if ids.index(t) >= 2)
    kept = ids[:ids.index(stop_id) + 1]
    prefix = complete(client, "vanilla", prompt=CODE, max_tokens=len(kept) - 1).json()
    head = prefix["choices"][0]["text"]  # the text of every token before the stop token
    for route in ROUTES:
        body = {"model": MODEL, "prompt": CODE, "max_tokens": 48, "temperature": 0,
                "route": route, "stop_token_ids": [stop_id], "return_token_ids": True}
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == \
            (head, "stop", stop_id), (route, choice)
        assert choice["token_ids"] == kept, route
        assert r.json()["usage"]["completion_tokens"] == len(kept), route
        text, chunks = stream_text(client, "/v1/completions", {
            **body, "stream_options": {"include_usage": True}})
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
        assert (text, finish) == (head, "stop"), route
        assert chunks[-1]["usage"]["completion_tokens"] == len(kept), route


def test_min_p_goes_vanilla_with_reason_or_is_refused_when_forced(client):
    r = complete(client, prompt=CODE, max_tokens=4, min_p=0.1)
    assert (r.headers["x-specserve-route"], r.headers["x-specserve-reason"]) == \
        ("vanilla", "unsupported_option")
    forced = client.post("/v1/completions", json={"model": MODEL, "prompt": CODE, "max_tokens": 4,
                                                   "min_p": 0.1, "route": "speculative"})
    assert forced.status_code == 400  # refused by the ingress: no pool saw it
    assert forced.json()["error"]["param"] == "min_p"
    assert "min_p" in forced.json()["error"]["message"]


@pytest.mark.parametrize("body, status, param, message", [
    ({"model": "nope", "prompt": "x"}, 404, None, None),
    ({"model": MODEL, "prompt": "x", "max_tokens": -1}, 400, None, None),
    ({"model": MODEL, "prompt": "x", "max_tokens": 100000}, 400, None, None),
    ({"model": MODEL, "prompt": "x", "temperature": -1}, 400, None, None),
    ({"model": MODEL, "prompt": "x", "route": "fastest"}, 400, "route", None),
    ({"model": MODEL}, 400, None, None),
    ({"model": MODEL, "messages": "not a list"}, 400, None, None),
    # the request models' validation errors name their field and the union member meant
    # (router/errors.py `describe_validation_error`, the same cases as tests/unit/test_errors.py)
    ({"model": MODEL, "prompt": "x", "stop": ["a"] * 10}, 400, "stop",
     "stop: List should have at most 4 items after validation, not 10"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stop": ["a"] * 5}, 400,
     "stop", "stop: List should have at most 4 items after validation, not 5"),
    ({"model": MODEL, "prompt": [1, -2]}, 400, "prompt",
     "prompt[1]: Input should be greater than or equal to 0, got -2"),
    ({"model": MODEL, "prompt": [[1, 2], [-1]]}, 400, "prompt",
     "prompt[1][0]: Input should be greater than or equal to 0, got -1"),
    ({"model": MODEL, "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens",
     "max_tokens: Input should be a valid integer, unable to parse string as an integer"),
    ({"model": MODEL, "prompt": 123}, 400, "prompt", "prompt: Input should be a valid list"),
    ({"model": MODEL, "prompt": "x", "stop": 5}, 400, "stop",
     "stop: Input should be a valid string"),
])
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(client, body, status, param,
                                                                      message):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    r = client.post(path, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status and err["message"] and err["type"]
    if param:
        assert err["param"] == param
    if message:
        assert err["message"] == message
    assert complete(client, prompt=CODE, max_tokens=2).json()["usage"]["completion_tokens"] == 2


def test_body_that_is_not_json(client):
    r = client.post("/v1/completions", content=b"{not json", headers={"content-type":
                                                                      "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "BadRequestError"


@pytest.mark.parametrize("headers", [{"content-type": "text/plain"},
                                     {"content-type": "application/x-www-form-urlencoded"}, {}])
def test_a_json_body_of_another_media_type_gets_vllms_answer(client, headers):
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1}).encode()
    r = client.post("/v1/completions", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"message": UNSUPPORTED_MEDIA_TYPE, "type": "BadRequestError",
                                 "param": None, "code": 400}


def test_a_json_body_with_a_charset_parameter_is_served(client):
    """`application/json; charset=utf-8` is JSON: the media-type check looks at the type only."""
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1}).encode()
    r = client.post("/v1/completions", content=body,
                    headers={"content-type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1


@pytest.mark.parametrize("route", ["vanilla", "speculative"])
def test_an_engine_refusal_names_its_param(client, route):
    """The engine refuses logprobs above its limit; vLLM names the field in its message only."""
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": CODE, "max_tokens": 2,
                                             "logprobs": 100, "route": route})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "logprobs"


def test_health_says_ok_only_once_every_pools_engines_are_up(client, serve_config):
    """Readiness: while the application started, /health answered 503 "starting" whenever a pool
    had fewer live replicas (engine up, reporting) than it starts with, and "ok" after."""
    from tests.session_app import HEALTH_AT_START

    ready = False
    for status, body in HEALTH_AT_START:
        up = all(p["replicas"] >= p["initial_replicas"] for p in body["pools"].values())
        ready = ready or up
        assert (status, body["status"]) == ((200, "ok") if ready else (503, "starting")), body
    r = client.get("/health")
    pools = r.json()["pools"]
    assert (r.status_code, r.json()["status"]) == (200, "ok")
    assert {p: v["initial_replicas"] for p, v in pools.items()} == {
        p: serve_config.initial_replicas(p) for p in ("vanilla", "speculative")}
    assert all(v["replicas"] >= v["initial_replicas"] for v in pools.values()), pools


def test_models_lists_the_served_model_as_openai_model_objects(client):
    listing = client.get("/v1/models").json()
    assert listing["object"] == "list" and [m["id"] for m in listing["data"]] == [MODEL]
    model = listing["data"][0]
    # OpenAI's Model object: id, object "model", created (Unix seconds), owned_by
    assert (model["object"], model["owned_by"]) == ("model", "specserve")
    assert isinstance(model["created"], int) and 0 < time.time() - model["created"] < 86400
    assert model["metadata"]["pools"] == ["speculative", "vanilla"]
    assert client.get(f"/v1/models/{MODEL}").json() == model
    missing = client.get("/v1/models/no-such-model")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == 404


def test_metrics_show_acceptance_on_the_speculative_pool(client):
    complete(client, "speculative", prompt=CODE, max_tokens=64)
    time.sleep(1.5)  # the pools push stats every 0.5 s
    samples = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("specserve_") and "{" in line:
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples['specserve_spec_decode_num_draft_tokens_total{pool="speculative"}'] > 0
    assert samples['specserve_spec_decode_num_accepted_tokens_total{pool="speculative"}'] > 0
    assert samples['specserve_spec_decode_num_drafts_total{pool="vanilla"}'] == 0
    assert samples['specserve_requests_total{reason="requested",route="speculative",task="code"}'] >= 1


def test_prompt_beyond_the_speculator_context(client, serve_config):
    from tests.session_app import SPECULATOR_CONTEXT
    from router.request import load_tokenizer
    from core import resolve_path

    tokenizer = load_tokenizer(resolve_path(serve_config.model.path))
    line, prompt = "    total += values[i] * weights[i]\n", "def score(values, weights):\n"
    while len(tokenizer.encode(prompt).ids) < SPECULATOR_CONTEXT + 20:
        prompt += line
    auto = complete(client, prompt=prompt, max_tokens=32)
    assert (auto.headers["x-specserve-route"], auto.headers["x-specserve-reason"]) == \
        ("vanilla", "beyond_speculator_context")
    forced = complete(client, "speculative", prompt=prompt, max_tokens=32)
    assert forced.json()["choices"][0]["text"] == auto.json()["choices"][0]["text"]


def test_responses_name_their_speculator_and_the_router_tallies_it(client):
    """`system_fingerprint` (OpenAI's backend-configuration field) names the pool and speculator
    that served; the router's live acceptance per speculator (what a rollout compares) counts it."""
    import vllm

    prints = {route: complete(client, route, prompt=CODE, max_tokens=32).json()[
        "system_fingerprint"] for route in ROUTES}
    assert prints == {"vanilla": f"specserve-vanilla-target-vllm-{vllm.__version__}",
                      "speculative": f"specserve-speculative-draft-vllm-{vllm.__version__}"}
    body = {"model": MODEL, "prompt": CODE, "max_tokens": 16, "temperature": 0,
            "route": "speculative", "stream_options": {"include_usage": True}}
    _, chunks = stream_text(client, "/v1/completions", body)
    assert chunks[-1]["system_fingerprint"] == prints["speculative"]  # the usage chunk
    tallied = until(lambda: client.get("/admin/speculators").json()["speculators"].get(
        prints["speculative"], {}).get("code"), 10, 0.5)
    assert tallied and tallied["steps"] > 0 and tallied["mean_acceptance_length"] >= 1.0, tallied
    assert prints["vanilla"] not in client.get("/admin/speculators").json()["speculators"]
