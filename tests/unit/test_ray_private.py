"""core.ray_private: every private Ray name specserve uses still exists in the installed Ray with
the shape the project relies on. A failure here names the symbol a Ray upgrade moved or changed:
read the new Ray there and update core/ray_private.py and its users together."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest
import ray

from core import ray_private

SYMBOLS = sorted(ray_private._SYMBOLS)


def test_the_installed_ray_is_the_one_the_table_was_read_against():
    assert ray.__version__ == ray_private.RAY_VERSION_READ, (
        f"ray {ray.__version__} installed, core/ray_private.py was read against "
        f"{ray_private.RAY_VERSION_READ}: check every symbol it names in the new Ray")


@pytest.mark.parametrize("name", SYMBOLS)
def test_each_private_symbol_resolves(name):
    module, attr = ray_private._SYMBOLS[name]
    assert hasattr(importlib.import_module(module), attr), f"{module}.{attr} is gone (Ray changed)"
    assert getattr(ray_private, name) is getattr(importlib.import_module(module), attr)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such"):
        ray_private.no_such  # noqa: B018


def test_the_shapes_used():
    # Label checks: one dict argument, ValueError on a bad label.
    with pytest.raises(ValueError):
        ray_private.validate_node_label_syntax({"pool": "a b"})
    with pytest.raises(ValueError):
        ray_private.validate_node_labels({"ray.io/node-id": "x"})
    ray_private.validate_node_label_syntax({"specserve.io/pool": "vanilla"})
    # The models: fields the ingress and the batch driver read or fill.
    card = ray_private.ModelCard(id="m", object="model", owned_by="specserve", permission=[],
                                 metadata={"max_model_len": 8})
    assert card.id == "m"
    exc = ray_private.OpenAIHTTPException(status_code=400, message="bad", type="BadRequestError")
    assert (exc.status_code, exc.message) == (400, "bad")
    from ray.serve.llm.openai_api_models import ErrorResponse as PublicErrorResponse
    assert issubclass(PublicErrorResponse, ray_private.ErrorResponse)
    assert {"error"} <= set(ray_private.ErrorResponse.model_fields)
    assert list(inspect.signature(ray_private.sanitize_chat_completion_request).parameters) == [
        "request"]
    # The handles' router loop and the declarative apply.
    assert hasattr(ray_private.SingletonThreadRouter, "_asyncio_loop")
    # The routers' long-poll loop: stop() clears is_running, which _poll_next checks.
    assert "self.is_running = False" in inspect.getsource(ray_private.LongPollClient.stop)
    assert "if not self.is_running" in inspect.getsource(ray_private.LongPollClient._poll_next)
    from ray.serve._private.client import ServeControllerClient
    for method in ("get_serve_details", "deploy_apps"):
        assert callable(getattr(ServeControllerClient, method)), method


def test_the_queue_length_probe_is_a_coroutine_of_that_name():
    cls_name, method = ray_private.QUEUE_LEN_PROBE.split(".")
    cls = getattr(importlib.import_module(ray_private.QUEUE_LEN_PROBE_MODULE), cls_name)
    probe = getattr(cls, method)
    assert inspect.iscoroutinefunction(probe) and probe.__qualname__ == ray_private.QUEUE_LEN_PROBE


def test_the_ingress_hooks_router_ingress_overrides_exist():
    from ray.serve.llm.ingress import OpenAiIngress

    for hook in ray_private.INGRESS_HOOKS:
        assert callable(getattr(OpenAiIngress, hook, None)), f"OpenAiIngress.{hook} is gone"
    assert list(inspect.signature(OpenAiIngress._process_llm_request).parameters) == [
        "self", "body", "call_method", "raw_request"]
    assert list(inspect.signature(OpenAiIngress._get_configured_serve_handle).parameters) == [
        "self", "model_id"]
    # `_get_response` picks the handle through the hook the ingress overrides.
    assert "self._get_configured_serve_handle(" in inspect.getsource(OpenAiIngress._get_response)



def test_importing_core_and_validating_a_config_load_no_ray():
    code = ("import sys, core, core.ray_private; "
            "core.SpecserveConfig.from_yaml(core.DEFAULT_CONFIG_PATH); print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_the_llm_server_hooks_the_pools_override_exist():
    from ray.serve.llm.deployment import LLMServer

    for hook in ray_private.LLM_SERVER_HOOKS:
        assert callable(getattr(LLMServer, hook, None)), f"LLMServer.{hook} is gone"
    assert list(inspect.signature(LLMServer._batch_output_stream).parameters) == [
        "self", "generator"]
    # the streamed path goes through it (deployments/streaming.py replaces it)
    assert "self._batch_output_stream(" in inspect.getsource(LLMServer._run_request)
    assert list(inspect.signature(ray_private.Batcher).parameters) == ["generator", "interval_ms"]
    # POST /admin/reset_prefix_cache: broadcast(handle, method_name) to every replica, which
    # PoolServer.reset_prefix_cache answers (LLMServer has one that drops vLLM's answer)
    assert list(inspect.signature(ray_private.broadcast).parameters)[:2] == ["handle",
                                                                            "method_name"]
    assert callable(getattr(LLMServer, "reset_prefix_cache", None))
