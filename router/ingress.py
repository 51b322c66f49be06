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
import functools
import json
import logging
import time
import uuid

from fastapi import FastAPI, Request
from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentHandle
from ray.serve.llm.ingress import OpenAiIngress, make_fastapi_ingress
from starlette.responses import JSONResponse, Response, StreamingResponse
from vllm.entrypoints.generate.base.protocol import StreamOptions

from core import PUSH_PERIOD_S, Route, SpecserveConfig, use_serve_log_handlers
from core.ray_private import ModelCard, OpenAIHTTPException
from router.admin import AdminEndpoints
from router.auth import ApiKeyGuard, ApiKeys
from router.board import get_board
from router.capture import CaptureMarks
from router.body_limit import BodyLimit
from router.decider import PoolHealth, RouteDecider
from router.errors import engine_error_param, error_response, install_error_handlers
from router.metrics import CONTENT_TYPE, RouterMetrics
from router.policy import RequestFeatures
from router.streaming import (REPLICA_FAILURES, PoolLost, RelayedStream, await_unless_gone,
                              guard_stream, relay_usage, wants_usage)
from router.wake import PoolWaker

logger = logging.getLogger("specserve.router")

# The pool chosen for the request being handled; read by `_get_configured_serve_handle`, which
# Ray's `OpenAiIngress._get_response` calls in the same task (private hooks of Ray's ingress:
# core/ray_private.py INGRESS_HOOKS).
_ROUTE: contextvars.ContextVar[Route] = contextvars.ContextVar("specserve_route")


def build_ingress(cfg: SpecserveConfig, pools: dict[str, Application]) -> Application:
    """The router deployment over `pools`, bound: its FastAPI app and middleware, the
    deployment's options and its arguments, all from the whole config.

    The app answers errors as OpenAI error JSON, checks the API keys of `cfg.server` (401 without
    a valid `Authorization: Bearer <key>`, admin keys for /admin/*, see router/auth.py) and
    limits the bytes received (413 above `server.max_body_bytes`, router/body_limit.py). CORS is
    off: a browser client needs a proxy in front. Each call is one build of the application,
    named by a fresh `generation` (the runtime pin lives as long as it: router/board.py).

    Args:
        cfg: the application's config.
        pools: each configured pool's bound deployment, keyed "vanilla" / "speculative".
    """
    server = cfg.server
    app = FastAPI(title="specserve")
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_body_bytes=server.max_body_bytes)
    app.add_middleware(ApiKeyGuard, api_keys_env=server.api_keys_env,  # outermost: keys first
                       admin_api_keys_env=server.admin_api_keys_env)
    card = ModelCard(id=cfg.model.served_model_name, object="model", owned_by="specserve",
                     permission=[], metadata={"max_model_len": cfg.model.max_model_len,
                                              "pools": sorted(pools)})
    actor = {"num_cpus": 0}
    if server.node_labels:  # e.g. the head's: a worker node's loss never takes the router
        actor["label_selector"] = dict(server.node_labels)
    ingress = serve.deployment(make_fastapi_ingress(SpecserveIngress, endpoint_map=ENDPOINTS,
                                                    app=app),
                               name="router", num_replicas=1, ray_actor_options=actor,
                               max_ongoing_requests=1024)
    return ingress.bind(pools=pools, model_card=card, config=cfg.model_dump(mode="json"),
                        generation=uuid.uuid4().hex)


class SpecserveIngress(AdminEndpoints, OpenAiIngress):
    """Ingress deployment: OpenAI endpoints over the two pools, and /admin/* (router/admin.py).

    Args:
        pools: DeploymentHandle of each configured pool, keyed "vanilla" / "speculative".
        model_card: the served model's card for /v1/models.
        config: `SpecserveConfig.model_dump()` of the application.
        generation: this build of the application (deployments/app.py); the runtime pin lives
            as long as it.
    """

    def __init__(self, pools: dict[str, DeploymentHandle], model_card: ModelCard, config: dict,
                 generation: str = ""):
        super().__init__(llm_deployments={model_card.id: next(iter(pools.values()))},
                         model_cards={model_card.id: model_card})
        self._cfg = SpecserveConfig.model_validate(config)
        for field in ("api_keys_env", "admin_api_keys_env"):  # refuse to start without the keys
            if getattr(self._cfg.server, field):
                ApiKeys.from_env(getattr(self._cfg.server, field), f"server.{field}")
        # also what POST /admin/reset_prefix_cache broadcasts through (router/admin.py)
        self._handles = {pool: h.options(stream=True) for pool, h in pools.items()}
        use_serve_log_handlers()
        ctx = serve.get_replica_context()
        self._board = get_board(ctx.app_name)
        self._generation = generation
        self._created = int(time.time())  # /v1/models' `created`
        scaling = self._cfg.autoscaling
        self._health = PoolHealth(scales_to_zero=[
            p for p in pools if scaling.enabled and scaling.pool(p).min_replicas == 0])
        self._waker = PoolWaker(pools, self._health, scaling.scale_from_zero_wait_s,
                                lambda pool: self._metrics.observe_wake(pool))
        self._decider = RouteDecider(self._cfg, pools, generation, self._board,
                                     ctx.replica_id.unique_id, "latency", self._health,
                                     self._waker)
        self._pressure = self._decider.pressure
        self._metrics = RouterMetrics(
            self._pressure.pool_stats, self._decider.speedup_model, model_card.id,
            lambda: (self._decider.speculator_tallies(), self._decider.rollout))
        self._capture = CaptureMarks(self._cfg.capture)
        self._ready = False  # every pool has had its starting replicas up (`health`)
        self._background = asyncio.get_event_loop().create_task(self._decider.run())

    def _get_configured_serve_handle(self, model_id: str) -> DeploymentHandle:
        return self._handles[_ROUTE.get()]

    async def _forward(self, body, call_method: str, raw_request: Request | None,
                       route: Route, sequences: int, context: int = 0) -> Response:
        """The pool's response; counts its `sequences` (with `context` tokens of context over
        them) in flight until it ends (streams: RelayedStream)."""
        _ROUTE.set(route)
        self._pressure.start(route, sequences, context)
        try:
            response = await super()._process_llm_request(body, call_method, raw_request)
        except BaseException:
            self._pressure.finish(route, sequences, context)
            raise
        if not isinstance(response, StreamingResponse):
            self._pressure.finish(route, sequences, context)
        return response

    async def _forward_watched(self, body, call_method: str, raw_request: Request | None,
                               route: Route, sequences: int, context: int = 0) -> Response:
        """`_forward`, abandoned with `PoolLost` if `route`'s last replica leaves the StatsBoard
        before the response begins (a stream: its first chunk). Serve's handle would hold such a
        request until a new replica starts, minutes for a vLLM engine (router/streaming.py); nothing
        has reached the client yet, so the caller may retry it on the other pool."""
        async def release(response: Response) -> None:
            if isinstance(response, StreamingResponse):
                self._pressure.finish(route, sequences, context)
                aclose = getattr(response.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()

        return await await_unless_gone(
            self._forward(body, call_method, raw_request, route, sequences, context), route,
            self._health, PUSH_PERIOD_S, release)

    async def _process_llm_request(self, body, call_method: str,
                                   raw_request: Request | None = None) -> Response:
        await self._get_model_id(body.model)  # 404 before any decision is counted
        routed = await self._decider.route(self._decider.parse(body))
        features, decision, headers = routed.features, routed.decision, routed.headers
        retry_after = {"Retry-After": str(self._cfg.server.retry_after_s)}
        if routed.refusal is not None:
            if routed.refusal.outcome is not None:
                self._metrics.observe_decision(decision.route, routed.refusal.outcome,
                                               features.task, None)
            return error_response(routed.refusal.status, routed.refusal.message,
                                  headers={**retry_after, **headers})
        route, sequences = decision.route, routed.request.sequences
        context = sequences * features.context_tokens  # counted in flight with them
        self._metrics.observe_decision(route, decision.reason, features.task, decision.speedup)
        logger.info(json.dumps(routed.log_record(
            raw_request.headers.get("x-request-id") if raw_request else None)))
        self._capture.mark(body, raw_request.headers.get("authorization") if raw_request else None,
                           features.task)
        keep_usage = wants_usage(body)  # the client's choice, whichever pool ends up serving
        if body.stream and not keep_usage:
            # vLLM reports a stream's acceptance only on its final usage chunk: ask for it, learn
            # from it, and drop it before the client sees it (`relay_usage`).
            body.stream_options = StreamOptions(include_usage=True)
        for attempt in (1, 2):  # a replica failure before any output is retried once
            try:
                response = await self._forward_watched(body, call_method, raw_request, route,
                                                       sequences, context)
                break
            except OpenAIHTTPException as e:  # the engine refused it: say which path did
                return error_response(e.status_code, e.message, engine_error_param(e.message),
                                      headers=headers)
            except (*REPLICA_FAILURES, PoolLost) as e:
                self._health.failed(route)
                retry = self._decider.retry_route(route, decision)
                logger.warning(json.dumps({"event": "replica_failure", "route": route,
                                           "attempt": attempt, "error": type(e).__name__,
                                           "retry_route": retry if attempt == 1 else None}))
                if attempt == 2:
                    return error_response(503, f"The {route} pool lost the request twice; retry "
                                          "later", headers={**headers, **retry_after})
                self._metrics.observe_retry(route)
                headers["x-specserve-retried"] = "1"
                if self._health.asleep(retry):  # it scaled to zero meanwhile: wake it, wait
                    waited = await self._waker.wait_awake(retry)
                    if waited is None:
                        return self._not_woken(retry, features)
                    headers["x-specserve-scaled-from-zero-s"] = f"{waited:.1f}"
                if retry != route:
                    headers.update({"x-specserve-route": retry,
                                    "x-specserve-reason": "pool_unavailable"})
                    route = retry
        response.headers.update(headers)
        if isinstance(response, StreamingResponse):  # in flight until RelayedStream ends
            return RelayedStream(self._relay(response.body_iterator, route, features, keep_usage),
                                 functools.partial(self._pressure.finish, route, sequences,
                                                   context),
                                 status_code=response.status_code, headers=dict(response.headers),
                                 media_type=response.media_type)
        if route == "speculative" and isinstance(response, JSONResponse):
            self._decider.learn(features, json.loads(response.body))
        return response

    def _not_woken(self, pool: Route, features: RequestFeatures) -> Response:
        """503 for a request that waited `autoscaling.scale_from_zero_wait_s` for `pool`."""
        refused = self._decider.not_woken(pool)
        self._metrics.observe_decision(pool, refused.outcome, features.task, None)
        return error_response(refused.status, refused.message,
                              headers={"Retry-After": str(self._cfg.server.retry_after_s),
                                       "x-specserve-route": pool,
                                       "x-specserve-reason": "pool_scaled_to_zero"})

    async def _relay(self, packets, route: Route, features: RequestFeatures, keep_usage: bool):
        """Streams SSE packets through; learns from the usage event and drops it unless the
        client asked for it (`relay_usage`); a pool failure mid-stream ends it with an OpenAI
        error event (`guard_stream`). A client that goes away closes this generator, which
        cancels the pool's request (vLLM aborts it in the engine)."""
        guarded = guard_stream(packets, route, self._stream_failed)
        relayed = relay_usage(guarded, keep_usage,
                              functools.partial(self._decider.learn, features))
        try:
            async for packet in relayed:
                yield packet
        finally:
            await relayed.aclose()
            await guarded.aclose()

    def _stream_failed(self, route: Route, error: Exception) -> None:
        if isinstance(error, REPLICA_FAILURES):
            self._health.failed(route)

    async def metrics(self) -> Response:
        """Prometheus text: decisions, pool pressure and spec-decode counters."""
        return Response(self._metrics.render(), media_type=CONTENT_TYPE)

    async def models(self) -> Response:
        """OpenAI's `GET /v1/models`: `{"object": "list", "data": [model]}`, each model OpenAI's
        Model object (`id`, `object: "model"`, `created` in Unix seconds, `owned_by`) plus Ray
        Serve LLM's `permission` and `metadata` (`max_model_len`, `pools`). Ray Serve LLM's card
        has no `created`, which OpenAI's schema requires (clients with typed models refuse a
        listing without it): it is this application's start time."""
        listing = await super().models()
        return JSONResponse({"object": "list", "data": [self._model_json(c) for c in listing.data]})

    async def model_data(self, model: str) -> Response:
        """OpenAI's `GET /v1/models/{model}`: one model as in `models`; 404 (OpenAI error JSON)
        for a name this application does not serve."""
        return JSONResponse(self._model_json(await super().model_data(model)))

    def _model_json(self, card: ModelCard) -> dict:
        return {**card.model_dump(), "created": self._created}

    async def health(self) -> Response:
        """Readiness, and each pool's state: `{"status", "pools": {pool: {"replicas",
        "initial_replicas", "in_flight", "lossless_sampling"}}}`.

        503 with status "starting" until every pool's engines are up: the StatsBoard lists as many
        replicas of each pool as it starts with (`initial_replicas`: its `num_replicas`, or
        autoscaling's `initial_replicas` / `min_replicas`); a replica reports only once its engine
        serves. 200 with status "ok" from then on while the ingress runs: a pool that loses
        replicas later shows it in `replicas` (live, engine up), and its requests go to the other
        pool meanwhile. `lossless_sampling`: its replicas passed their sampling check at start
        (deployments/sampling_check.py).
        """
        live = self._pressure.reported_replicas()
        wanted = {pool: self._cfg.initial_replicas(pool) for pool in live}
        self._ready = self._ready or all(live[p] >= n for p, n in wanted.items())
        pools = {p: {"replicas": live[p], "initial_replicas": wanted[p],
                     "in_flight": load.in_flight, "lossless_sampling": load.lossless_sampling}
                 for p, load in self._pressure.loads().items()}
        return JSONResponse({"status": "ok" if self._ready else "starting", "pools": pools},
                            status_code=200 if self._ready else 503)


ENDPOINTS = {
    "models": lambda app: app.get("/v1/models"),
    "model_data": lambda app: app.get("/v1/models/{model:path}"),
    "completions": lambda app: app.post("/v1/completions"),
    "chat": lambda app: app.post("/v1/chat/completions"),
    "metrics": lambda app: app.get("/metrics"),
    "health": lambda app: app.get("/health"),
    "get_policy": lambda app: app.get("/admin/policy"),
    "put_policy": lambda app: app.put("/admin/policy"),
    "get_speedup": lambda app: app.get("/admin/speedup"),
    "get_step_samples": lambda app: app.get("/admin/step_samples"),
    "get_autoscaling": lambda app: app.get("/admin/autoscaling"),
    "get_speculators": lambda app: app.get("/admin/speculators"),
    "reset_prefix_cache": lambda app: app.post("/admin/reset_prefix_cache"),
}
