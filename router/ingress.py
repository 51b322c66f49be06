"""The OpenAI-compatible ingress: picks the vanilla or the speculative pool for every request.

Built on Ray Serve LLM's `OpenAiIngress` (request parsing, streaming, engine error mapping); adds the
route decision, its headers (`x-specserve-route`, `-reason`, `-task`, `-speedup`), a structured
decision log line, online learning of acceptance from each speculative response, `GET /metrics`
and `GET /health`.

Request extension: `"route": "auto" | "speculative" | "vanilla"` in the JSON body (OpenAI clients
send it with `extra_body={"route": ...}`); default `auto`.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging

from fastapi import FastAPI, Request
from ray import serve
from ray.llm._internal.serve.core.configs.openai_api_models import ModelCard, OpenAIHTTPException
from ray.serve.handle import DeploymentHandle
from ray.serve.llm.ingress import OpenAiIngress
from starlette.responses import JSONResponse, Response, StreamingResponse
from vllm.entrypoints.generate.base.protocol import StreamOptions

from cluster.config import Route, SpecserveConfig, resolve_path
from deployments.stats import get_board
from router.estimator import RouteEstimator
from router.features import load_tokenizer, request_features
from router.errors import RequestError, error_response, install_error_handlers
from router.metrics import CONTENT_TYPE, RouterMetrics
from router.policy import PoolLoad, RequestFeatures, choose_route
from router.pressure import PressureTracker

logger = logging.getLogger("specserve.router")

# The pool chosen for the request being handled; read by `_get_configured_serve_handle`, which
# Ray's `OpenAiIngress._get_response` calls in the same task.
_ROUTE: contextvars.ContextVar[Route] = contextvars.ContextVar("specserve_route")


def build_fastapi_app(max_body_bytes: int) -> FastAPI:
    """FastAPI app with OpenAI error JSON and a request-size limit (413 above `max_body_bytes`).

    CORS is off: a browser client needs an explicit proxy or a future config switch.
    """
    app = FastAPI(title="specserve")
    install_error_handlers(app)

    @app.middleware("http")
    async def _limit_body(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body_bytes):
            return error_response(413, f"Request body larger than {max_body_bytes} bytes")
        return await call_next(request)

    return app


class SpecserveIngress(OpenAiIngress):
    """Ingress deployment: OpenAI endpoints over the two pools.

    Args:
        pools: DeploymentHandle of each configured pool, keyed "vanilla" / "speculative".
        model_card: the served model's card for /v1/models.
        config: `SpecserveConfig.model_dump()` of the application.
    """

    def __init__(self, pools: dict[str, DeploymentHandle], model_card: ModelCard, config: dict):
        super().__init__(llm_deployments={model_card.id: next(iter(pools.values()))},
                         model_cards={model_card.id: model_card})
        self._cfg = SpecserveConfig.model_validate(config)
        self._handles = {pool: h.options(stream=True) for pool, h in pools.items()}
        replicas = {pool: self._cfg.initial_replicas(pool) for pool in pools}
        ctx = serve.get_replica_context()
        self._pressure = PressureTracker(get_board(ctx.app_name), ctx.replica_id.unique_id, replicas)
        self._tokenizer = load_tokenizer(resolve_path(self._cfg.model.path))
        self._speculator_context = (self._cfg.speculative.speculator.context_len()
                                    if "speculative" in pools else None)
        self._estimator = RouteEstimator(self._cfg.speculative.speculator.num_speculative_tokens)
        self._last_auto_route: dict[str, Route] = {}  # per task type, for hysteresis
        self._metrics = RouterMetrics(self._pressure.pool_stats, self._estimator)
        self._pressure_task = asyncio.get_event_loop().create_task(
            self._pressure.run(on_snapshot=self._estimator.update_pools))

    def _get_configured_serve_handle(self, model_id: str) -> DeploymentHandle:
        return self._handles[_ROUTE.get()]

    def _loads(self) -> dict[Route, PoolLoad]:
        """Each pool's load with its predicted step time at the batch this request would make."""
        out = {}
        for pool, load in self._pressure.loads().items():
            batch = (load.in_flight + 1) / max(load.replicas, 1)
            out[pool] = PoolLoad(load.replicas, load.in_flight,
                                 self._estimator.step_time(pool, batch))
        return out

    async def _process_llm_request(self, body, call_method: str,
                                   raw_request: Request | None = None) -> Response:
        await self._get_model_id(body.model)  # 404 before any decision is counted
        features = request_features(body, self._tokenizer, self._speculator_context)
        features = dataclasses.replace(features, expected_tokens=self._estimator.expected_tokens(
            features.task, features.temperature))
        loads = self._loads()
        try:
            decision = choose_route(features, loads, self._cfg.router,
                                    self._last_auto_route.get(features.task))
        except ValueError as e:
            raise RequestError(400, str(e), "route") from None
        route = decision.route
        if decision.speedup is not None:
            self._last_auto_route[features.task] = route
        self._metrics.observe_decision(route, decision.reason, features.task, decision.speedup)
        logger.info(json.dumps({
            "event": "route", "request_id": raw_request.headers.get("x-request-id")
            if raw_request else None, "route": route, "reason": decision.reason,
            "task": features.task, "temperature": features.temperature,
            "expected_tokens": round(features.expected_tokens, 3),
            "speedup": None if decision.speedup is None else round(decision.speedup, 3),
            "in_flight": {p: load.in_flight for p, load in loads.items()}}))
        headers = {"x-specserve-route": route, "x-specserve-reason": decision.reason,
                   "x-specserve-task": features.task}
        if decision.speedup is not None:
            headers["x-specserve-speedup"] = f"{decision.speedup:.2f}"
        strip_usage = False
        if route == "speculative" and body.stream and not (
                body.stream_options and body.stream_options.include_usage):
            # vLLM reports a stream's acceptance only on its final usage chunk: ask for it, learn
            # from it, and drop it before the client sees it.
            body.stream_options, strip_usage = StreamOptions(include_usage=True), True
        _ROUTE.set(route)
        self._pressure.start(route)
        try:
            response = await super()._process_llm_request(body, call_method, raw_request)
        except OpenAIHTTPException as e:  # the engine refused it: say which path did
            self._pressure.finish(route)
            return error_response(e.status_code, e.message, headers=headers)
        except BaseException:
            self._pressure.finish(route)
            raise
        response.headers.update(headers)
        if isinstance(response, StreamingResponse):
            response.body_iterator = self._relay(response.body_iterator, route, features,
                                                 strip_usage)
        else:
            self._pressure.finish(route)
            if route == "speculative" and isinstance(response, JSONResponse):
                self._learn(json.loads(response.body), features)
        return response

    def _learn(self, payload: dict, features: RequestFeatures) -> None:
        """Folds a response's per-request acceptance histogram into the estimates."""
        spec = (payload.get("metrics") or {}).get("speculative_decoding")
        if spec and spec.get("acceptance_histogram"):
            self._estimator.acceptance.observe(features.task, features.temperature,
                                               spec["acceptance_histogram"])

    async def _relay(self, packets, route: Route, features: RequestFeatures, strip_usage: bool):
        """Streams SSE packets through; learns from (and maybe drops) the usage event."""
        try:
            async for packet in packets:
                if '"speculative_decoding"' in packet:
                    kept = []
                    for event in packet.split("\n\n"):
                        if event.startswith("data: ") and '"speculative_decoding"' in event:
                            self._learn(json.loads(event[6:]), features)
                            if strip_usage:
                                continue
                        kept.append(event)
                    packet = "\n\n".join(kept)
                    if not packet.strip():
                        continue
                yield packet
        finally:
            self._pressure.finish(route)

    async def metrics(self) -> Response:
        """Prometheus text: decisions, pool pressure and spec-decode counters."""
        return Response(self._metrics.render(), media_type=CONTENT_TYPE)

    async def health(self) -> dict:
        """200 while the ingress runs; lists each pool's live replicas and in-flight requests."""
        return {"status": "ok", "pools": {p: {"replicas": load.replicas, "in_flight": load.in_flight}
                                          for p, load in self._pressure.loads().items()}}


ENDPOINTS = {
    "models": lambda app: app.get("/v1/models"),
    "model_data": lambda app: app.get("/v1/models/{model:path}"),
    "completions": lambda app: app.post("/v1/completions"),
    "chat": lambda app: app.post("/v1/chat/completions"),
    "metrics": lambda app: app.get("/metrics"),
    "health": lambda app: app.get("/health"),
}
