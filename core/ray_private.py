"""Every private Ray name specserve uses, in one table: read against ray 2.60.0.

Ray Serve and Ray Serve LLM have no public API for these; a Ray upgrade may move or change any of
them, and `tests/unit/test_ray_private.py` fails, naming the symbol, when the installed Ray no
longer has one with the shape used here. Nothing else in the project imports `ray._private`,
`ray.serve._private`, `ray.llm._internal` or an underscored Ray name.

Names are resolved on first use (`from core.ray_private import ModelCard` imports only Ray Serve
LLM's models module), so importing this module loads no Ray, and the config's label check does not
load vLLM.

- `validate_node_label_syntax`, `validate_node_labels`: `ray._private.label_utils`, the checks
  of `ray start --labels` (core/pool_config.py).
- `ModelCard`: `ray.llm._internal.serve.core.configs.openai_api_models.ModelCard`, a `/v1/models`
  entry (router/ingress.py, bench/direct.py).
- `OpenAIHTTPException`: the same module's, what `OpenAiIngress` raises for an engine's error
  (router/errors.py, router/ingress.py).
- `ErrorResponse`: the same module's, the class an `LLMServer` yields for a refused request; the
  public `ray.serve.llm.openai_api_models.ErrorResponse` is a subclass of it, so `isinstance`
  needs this one (cluster/batch/run.py).
- `sanitize_chat_completion_request`: `ray.llm._internal.serve.core.ingress.utils.
  _sanitize_chat_completion_request`, which makes a chat request picklable for a handle call
  (cluster/batch/run.py).
- `SingletonThreadRouter`: `ray.serve._private.router.SingletonThreadRouter`; its
  `_asyncio_loop` is the loop every handle's router runs on (cluster/batch/app.py).
- `get_global_client`: `ray.serve.context._get_global_client`; its `get_serve_details` and
  `deploy_apps` (the declarative apply, which `serve.run` lacks: deployments/deploy.py).
- `LongPollClient`: `ray.serve._private.long_poll.LongPollClient`, the loop by which every handle's
  router follows the controller; its `stop()` and `is_running` (cluster/batch/app.py stops them all
  before `ray.shutdown()`: one still polling would auto-connect to a Ray that is gone).
- `QUEUE_LEN_PROBE`: the qualname of `RunningReplica.get_queue_len` in
  `ray.serve._private.request_router.replica_wrapper`, the probe a handle sends a replica before
  a request (cluster/batch/app.py).

Private methods of the public `ray.serve.llm.ingress.OpenAiIngress` that router/ingress.py
overrides or calls (listed in `INGRESS_HOOKS`, checked by the same test): `_process_llm_request`
(the body of `completions` and `chat`), `_get_configured_serve_handle` (the handle
`_get_response` sends to), `_get_model_id` (the 404 for an unknown model).

- `Batcher`: `ray.llm._internal.serve.utils.batcher.Batcher(generator, interval_ms)`, whose
  `stream()` yields lists of what `generator` made in each interval (deployments/streaming.py).
- `broadcast`: `ray.llm._internal.serve.utils.broadcast.broadcast(handle, method_name)`, which
  calls a method on every running replica of a deployment and returns their answers (blocking;
  what Ray Serve LLM's dev ingress uses for `POST /reset_prefix_cache`; router/admin.py).

Private methods of the public `ray.serve.llm.deployment.LLMServer` that deployments/pools.py
overrides or calls (`LLM_SERVER_HOOKS`): `_batch_output_stream(generator)` (a streamed response's
batching) and `_get_batch_interval_ms()` (its interval from `experimental_configs`).
"""

from __future__ import annotations

import importlib

RAY_VERSION_READ = "2.60.0"

_LLM_MODELS = "ray.llm._internal.serve.core.configs.openai_api_models"
_SYMBOLS = {  # name here -> (module, name there)
    "validate_node_label_syntax": ("ray._private.label_utils", "validate_node_label_syntax"),
    "validate_node_labels": ("ray._private.label_utils", "validate_node_labels"),
    "ModelCard": (_LLM_MODELS, "ModelCard"),
    "OpenAIHTTPException": (_LLM_MODELS, "OpenAIHTTPException"),
    "ErrorResponse": (_LLM_MODELS, "ErrorResponse"),
    "sanitize_chat_completion_request": ("ray.llm._internal.serve.core.ingress.utils",
                                         "_sanitize_chat_completion_request"),
    "SingletonThreadRouter": ("ray.serve._private.router", "SingletonThreadRouter"),
    "get_global_client": ("ray.serve.context", "_get_global_client"),
    "LongPollClient": ("ray.serve._private.long_poll", "LongPollClient"),
    "Batcher": ("ray.llm._internal.serve.utils.batcher", "Batcher"),
    "broadcast": ("ray.llm._internal.serve.utils.broadcast", "broadcast"),
}
# Serve's handle runs this coroutine per replica before sending it a request.
QUEUE_LEN_PROBE = "RunningReplica.get_queue_len"
QUEUE_LEN_PROBE_MODULE = "ray.serve._private.request_router.replica_wrapper"
INGRESS_HOOKS = ("_process_llm_request", "_get_configured_serve_handle", "_get_model_id",
                 "_get_response")
LLM_SERVER_HOOKS = ("_batch_output_stream", "_get_batch_interval_ms")

__all__ = sorted([*_SYMBOLS, "QUEUE_LEN_PROBE", "INGRESS_HOOKS", "LLM_SERVER_HOOKS",
                  "RAY_VERSION_READ"])


def __getattr__(name: str):
    if name not in _SYMBOLS:
        raise AttributeError(f"module 'core.ray_private' has no attribute {name!r}")
    module, attr = _SYMBOLS[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
