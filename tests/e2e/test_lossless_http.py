"""Speculative sampling is lossless at temperature > 0 through the application the product deploys:
the session application's speculative pool samples the target's exact distribution over HTTP (the
method, the engines and the power of the check: tests/integration/test_lossless.py).
"""

from __future__ import annotations


import pytest

from tests.session_app import MAX_IN_FLIGHT_PER_REPLICA
from tests.lossless_check import ALPHA, DEPTH, model, prompt_ids, target  # noqa: F401 (module fixtures)

pytestmark = pytest.mark.engine

HTTP_SAMPLES = 600


@pytest.mark.serve
def test_speculative_path_over_http_samples_the_target_distribution(client, server, serve_config,
                                                                    target, prompt_ids, model):
    """The same check through the application the product deploys: its speculative pool (the
    lab's draft model, tests/session_app.py; bfloat16, batched by concurrent requests) reports its
    sampling verified, serves forced sampled requests, and they follow the target."""
    import asyncio

    import httpx

    from models.exact import pit_values, uniformity_test

    pools = client.get("/health").json()["pools"]
    assert pools["speculative"]["lossless_sampling"] is True, pools
    ids = prompt_ids[1]
    body = {"model": serve_config.model.served_model_name, "prompt": ids, "max_tokens": DEPTH,
            "temperature": 1.0, "ignore_eos": True, "return_token_ids": True,
            "route": "speculative"}

    async def one(http, gate):
        async with gate:
            r = await http.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.headers["x-specserve-route"] == "speculative", dict(r.headers)
        return tuple(r.json()["choices"][0]["token_ids"])

    async def run():
        gate = asyncio.Semaphore(MAX_IN_FLIGHT_PER_REPLICA - 8)  # within the app's admission
        async with httpx.AsyncClient(base_url=server, timeout=300) as http:
            return await asyncio.gather(*(one(http, gate) for _ in range(HTTP_SAMPLES)))

    samples = asyncio.run(run())
    result = uniformity_test(pit_values(model, ids, samples, temperature=1.0))
    assert result.p_value > ALPHA, result
