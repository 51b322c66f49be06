"""`POST /admin/reset_prefix_cache` (router/admin.py) over a stand-in for Ray's broadcast: what
it answers for every mix of replica answers. End to end on real engines: tests/e2e/test_serving.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from core import ray_private
from router.admin import AdminEndpoints


class Admin(AdminEndpoints):
    def __init__(self, answers: dict):
        self._handles = {pool: pool for pool in answers}
        self.answers = answers


def reply(monkeypatch, answers: dict) -> tuple[int, dict]:
    def broadcast(handle, method):
        assert method == "reset_prefix_cache"
        got = answers[handle]
        if isinstance(got, Exception):
            raise got
        return got
    monkeypatch.setitem(ray_private.__dict__, "broadcast", broadcast)
    r = asyncio.run(Admin(answers).reset_prefix_cache())
    return r.status_code, json.loads(r.body)


def test_every_replica_reset_is_200_with_the_counts(monkeypatch):
    status, body = reply(monkeypatch, {"vanilla": [True, True], "speculative": [True]})
    assert status == 200
    assert body == {"pools": {"vanilla": {"replicas": 2, "reset": 2},
                              "speculative": {"replicas": 1, "reset": 1}}}


def test_a_replica_with_running_requests_is_a_409_naming_its_pool(monkeypatch):
    status, body = reply(monkeypatch, {"vanilla": [True], "speculative": [False, True]})
    assert status == 409
    assert body["error"]["code"] == 409 and body["error"]["message"].startswith("speculative pool")


@pytest.mark.parametrize("error", [TimeoutError("replicas not populated"),
                                   RuntimeError("actor died")])
def test_a_pool_that_does_not_answer_is_a_503_naming_it(monkeypatch, error):
    status, body = reply(monkeypatch, {"vanilla": [True], "speculative": error})
    assert status == 503
    assert body["error"]["message"].startswith("speculative pool") and str(error) in \
        body["error"]["message"]
