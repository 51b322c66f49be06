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
import functools
import json
import logging
from typing import get_args

from fastapi import FastAPI, Request
from ray import serve
from ray.llm._internal.serve.core.configs.openai_api_models import ModelCard, OpenAIHTTPException
from ray.serve.handle import DeploymentHandle
from ray.serve.llm.ingress import OpenAiIngress
from starlette.responses import JSONResponse, Response, StreamingResponse
from vllm.entrypoints.generate.base.protocol import StreamOptions

from cluster.config import Route, SpecserveConfig, TaskType, read_config_value
from deployments.logs import use_serve_log_handlers
from deployments.stats import PUSH_PERIOD_S, get_board
from router.admission import admit
from router.auth import OPEN_PATHS, ApiKeys
from router.decider import RouteDecider, route_headers
from router.features import max_prompt_tokens, prompt_tokens
from router.errors import RequestError, error_response, install_error_handlers
from router.health import REPLICA_FAILURES, PoolHealth, PoolLost, await_unless_gone
from router.metrics import CONTENT_TYPE, RouterMetrics
from router.policy import PoolLoad, RequestFeatures
from router.pressure import PressureTracker
from router.streaming import RelayedStream
from router.validation import Limits, validate_request

logger = logging.getLogger("specserve.router")

# The pool chosen for the request being handled; read by `_get_configured_serve_handle`, which
# Ray's `OpenAiIngress._get_response` calls in the same task.
_ROUTE: contextvars.ContextVar[Route] = contextvars.ContextVar("specserve_route")


def build_fastapi_app(max_body_bytes: int, api_keys_env: str | None = None) -> FastAPI:
    """FastAPI app with OpenAI error JSON, optional API keys (401 without a valid
    `Authorization: Bearer <key>`, see router/auth.py) and a request-size limit (413 above
    `max_body_bytes`).

    CORS is off: a browser client needs an explicit proxy or a future config switch.
    """
    app = FastAPI(title="specserve")
    install_error_handlers(app)
    keys: list[ApiKeys] = []  # read from the environment in the serving process, on first use

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        if api_keys_env and request.url.path not in OPEN_PATHS:
            if not keys:
                try:
                    keys.append(ApiKeys.from_env(api_keys_env))
                except ValueError:
                    logger.exception("API keys unavailable: refusing every request")
                    keys.append(ApiKeys([]))
            if not keys[0].allows(request.headers.get("authorization")):
                return error_response(401, "Missing or invalid API key: send "
                                      "`Authorization: Bearer <key>`",
                                      headers={"WWW-Authenticate": "Bearer"})
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
        if self._cfg.server.api_keys_env:
            ApiKeys.from_env(self._cfg.server.api_keys_env)  # refuse to start without the keys
        self._handles = {pool: h.options(stream=True) for pool, h in pools.items()}
        replicas = {pool: self._cfg.initial_replicas(pool) for pool in pools}
        use_serve_log_handlers()
        ctx = serve.get_replica_context()
        self._board = get_board(ctx.app_name)
        self._replica_id = ctx.replica_id.unique_id
        self._pressure = PressureTracker(self._board, self._replica_id, replicas)
        self._decider = RouteDecider(self._cfg, pools)
        self._estimator = self._decider.estimator
        self._metrics = RouterMetrics(self._pressure.pool_stats, self._estimator)
        self._health = PoolHealth()
        self._limits = Limits(self._cfg.model.max_model_len,
                              read_config_value(self._cfg.model.path, "vocab_size"),
                              self._cfg.server.max_n)
        loop = asyncio.get_event_loop()
        self._background = [
            loop.create_task(self._pressure.run(on_snapshot=self._observe)),
            loop.create_task(self._decider.share_forever(self._board, self._replica_id))]

    def _observe(self, snapshot) -> None:
        self._estimator.update_pools(snapshot)
        self._health.observe(snapshot)

    def _get_configured_serve_handle(self, model_id: str) -> DeploymentHandle:
        return self._handles[_ROUTE.get()]

    def _loads(self) -> dict[Route, PoolLoad]:
        """Each pool's load, live or not, with the step time it would run at with this request."""
        loads = self._estimator.with_step_times(self._pressure.loads())
        return {pool: dataclasses.replace(load, available=self._health.available(pool))
                for pool, load in loads.items()}

    def _prompt_len(self, body) -> int:
        """The prompt's length in target tokens where a limit depends on it, else a byte bound
        (router.features.max_prompt_tokens) already within every limit: short prompts, the
        common case, skip the tokenizer."""
        bound = max_prompt_tokens(body)
        max_tokens = getattr(body, "max_completion_tokens", None) or body.max_tokens or 1
        context = self._decider.speculator_context
        if bound + max_tokens <= self._cfg.model.max_model_len and (context is None
                                                                   or bound < context):
            return bound
        return prompt_tokens(body, self._decider.tokenizer)

    def _retry_route(self, failed: Route) -> Route:
        """Where a request goes after `failed` lost it: the other pool when it is up, else the
        same pool (Serve picks another of its replicas, if any)."""
        others = [p for p in self._handles if p != failed and self._health.available(p)]
        return others[0] if others else failed

    async def _forward(self, body, call_method: str, raw_request: Request | None,
                       route: Route) -> Response:
        """The pool's response; counts it in flight until it ends (streams: RelayedStream)."""
        _ROUTE.set(route)
        self._pressure.start(route)
        try:
            response = await super()._process_llm_request(body, call_method, raw_request)
        except BaseException:
            self._pressure.finish(route)
            raise
        if not isinstance(response, StreamingResponse):
            self._pressure.finish(route)
        return response

    async def _forward_watched(self, body, call_method: str, raw_request: Request | None,
                               route: Route) -> Response:
        """`_forward`, abandoned with `PoolLost` if `route`'s last replica leaves the StatsBoard
        before the response begins (a stream: its first chunk). Serve's handle would hold such a
        request until a new replica starts, minutes for a vLLM engine (router/health.py); nothing
        has reached the client yet, so the caller may retry it on the other pool."""
        async def release(response: Response) -> None:
            if isinstance(response, StreamingResponse):
                self._pressure.finish(route)
                aclose = getattr(response.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()

        return await await_unless_gone(self._forward(body, call_method, raw_request, route),
                                       route, self._health, PUSH_PERIOD_S, release)

    async def _process_llm_request(self, body, call_method: str,
                                   raw_request: Request | None = None) -> Response:
        await self._get_model_id(body.model)  # 404 before any decision is counted
        prompt_len = self._prompt_len(body)
        validate_request(body, prompt_len, self._limits)
        loads = self._loads()
        retry_after = {"Retry-After": str(self._cfg.server.retry_after_s)}
        if not any(load.available for load in loads.values()):
            return error_response(503, "No pool has a live replica; retry later",
                                  headers=retry_after)
        try:
            features, decision = self._decider.decide(body, loads, prompt_len)
        except ValueError as e:  # forces a pool not configured, or a lossy one at T > 0
            raise RequestError(400, str(e), getattr(e, "param", "route")) from None
        admitted = admit(decision, loads, self._cfg.server.max_in_flight_per_replica)
        if admitted is None:
            self._metrics.observe_decision(decision.route, "rejected_overload", features.task, None)
            return error_response(429, "Both pools are at their in-flight bound; retry later",
                                  headers={**retry_after, "x-specserve-route": decision.route,
                                           "x-specserve-reason": decision.reason})
        decision = admitted
        route = decision.route
        self._metrics.observe_decision(route, decision.reason, features.task, decision.speedup)
        logger.info(json.dumps({
            "event": "route", "request_id": raw_request.headers.get("x-request-id")
            if raw_request else None, "route": route, "reason": decision.reason,
            "task": features.task, "temperature": features.temperature,
            "expected_tokens": round(features.expected_tokens, 3),
            "speedup": None if decision.speedup is None else round(decision.speedup, 3),
            "in_flight": {p: load.in_flight for p, load in loads.items()}}))
        headers = route_headers(features, decision)
        strip_usage = False
        if route == "speculative" and body.stream and not (
                body.stream_options and body.stream_options.include_usage):
            # vLLM reports a stream's acceptance only on its final usage chunk: ask for it, learn
            # from it, and drop it before the client sees it.
            body.stream_options, strip_usage = StreamOptions(include_usage=True), True
        for attempt in (1, 2):  # a replica failure before any output is retried once
            try:
                response = await self._forward_watched(body, call_method, raw_request, route)
                break
            except OpenAIHTTPException as e:  # the engine refused it: say which path did
                return error_response(e.status_code, e.message, headers=headers)
            except (*REPLICA_FAILURES, PoolLost) as e:
                self._health.failed(route)
                retry = self._retry_route(route)
                logger.warning(json.dumps({"event": "replica_failure", "route": route,
                                           "attempt": attempt, "error": type(e).__name__,
                                           "retry_route": retry if attempt == 1 else None}))
                if attempt == 2:
                    return error_response(503, f"The {route} pool lost the request twice; retry "
                                          "later", headers={**headers, **retry_after})
                self._metrics.observe_retry(route)
                headers["x-specserve-retried"] = "1"
                if retry != route:
                    headers.update({"x-specserve-route": retry,
                                    "x-specserve-reason": "pool_unavailable"})
                    route = retry
        response.headers.update(headers)
        if isinstance(response, StreamingResponse):  # in flight until RelayedStream ends
            return RelayedStream(self._relay(response.body_iterator, route, features, strip_usage),
                                 functools.partial(self._pressure.finish, route),
                                 status_code=response.status_code, headers=dict(response.headers),
                                 media_type=response.media_type)
        if route == "speculative" and isinstance(response, JSONResponse):
            self._learn(json.loads(response.body), features)
        return response

    def _learn(self, payload: dict, features: RequestFeatures) -> None:
        self._decider.learn(features, payload)

    async def _relay(self, packets, route: Route, features: RequestFeatures, strip_usage: bool):
        """Streams SSE packets through; learns from (and maybe drops) the usage event.

        A pool failure after the stream began cannot be retried (the client has output): the
        stream ends with an OpenAI error event and `[DONE]`, never by hanging or a cut connection.
        A client that goes away closes this generator, which cancels the pool's request (vLLM
        aborts it in the engine).
        """
        guarded = self._guarded(packets, route)
        try:
            async for packet in guarded:
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
            await guarded.aclose()

    async def _guarded(self, packets, route: Route):
        try:
            async for packet in packets:
                yield packet
        except Exception as e:  # not BaseException: cancellation (client gone) propagates
            if isinstance(e, REPLICA_FAILURES):
                self._health.failed(route)
            logger.warning(json.dumps({"event": "stream_failure", "route": route,
                                       "error": type(e).__name__}))
            yield sse_error(503, f"The {route} pool failed mid-stream ({type(e).__name__}); "
                            "the output so far is incomplete")
        finally:
            aclose = getattr(packets, "aclose", None)
            if aclose is not None:  # cancels the pool's request if it still runs
                await aclose()

    async def metrics(self) -> Response:
        """Prometheus text: decisions, pool pressure and spec-decode counters."""
        return Response(self._metrics.render(), media_type=CONTENT_TYPE)

    async def get_policy(self) -> dict:
        """The pin in force and where it comes from (runtime or config)."""
        return {"pin": self._decider.pin,
                "source": self._decider.pin_source,
                "config_pin": self._cfg.router.pin}

    async def put_policy(self, request: Request) -> Response:
        """Sets the runtime pin for every ingress replica: body `{"pin": "auto" | "speculative" |
        "vanilla" | null}` (null returns to the config's `router.pin`). Reaches the other replicas
        within ~1 s; lost when the application restarts. 400 on a bad body."""
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "body: not valid JSON", param="pin")
        if not isinstance(body, dict) or set(body) != {"pin"}:
            return error_response(400, 'body: expected exactly {"pin": ...}', param="pin")
        try:
            self._decider.set_pin(body["pin"])
        except ValueError as e:
            return error_response(400, str(e), param="pin")
        await self._board.set_pin.remote(body["pin"])
        # again once the board has it: a board read issued before that ack, by this replica's
        # share loop, must not put the old pin back
        self._decider.set_pin(body["pin"])
        logger.info(json.dumps({"event": "pin", "pin": body["pin"]}))
        return JSONResponse(await self.get_policy())

    async def get_speedup(self) -> dict:
        """The profiled S(B) curve per task type at temperature 0 (see
        `RouteEstimator.speedup_curve`), with the largest batch at which S still reaches
        `router.min_speedup` ("pays_up_to_batch"; 0: nowhere)."""
        out = {}
        for task in get_args(TaskType):
            rows = self._estimator.speedup_curve(task, 0.0)
            pays = [r["batch"] for r in rows if r["speedup"] >= self._cfg.router.min_speedup]
            out[task] = {"pays_up_to_batch": max(pays, default=0), "curve": rows}
        return {"min_speedup": self._cfg.router.min_speedup, "tasks": out}

    async def health(self) -> dict:
        """200 while the ingress runs; lists each pool's live replicas, in-flight requests and
        whether its replicas sample losslessly at temperature > 0 (their startup check)."""
        return {"status": "ok", "pools": {p: {"replicas": load.replicas, "in_flight": load.in_flight,
                                              "lossless_sampling": load.lossless_sampling}
                                          for p, load in self._pressure.loads().items()}}


def sse_error(status: int, message: str) -> str:
    """An OpenAI error event followed by the end of the stream."""
    body = json.loads(error_response(status, message).body)
    return f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n"


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
}
