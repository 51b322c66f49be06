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

from core import Route, ServerConfig, SpecserveConfig, TaskType
from core import use_serve_log_handlers
from core import PUSH_PERIOD_S, get_board
from router.admission import admit, refusal
from router.auth import ApiKeyGuard, ApiKeys
from router.body_limit import BodyLimit
from router.decider import RouteDecider, route_headers
from router.errors import RequestError, error_response, install_error_handlers
from router.health import REPLICA_FAILURES, PoolHealth, PoolLost, await_unless_gone
from router.metrics import CONTENT_TYPE, RouterMetrics
from router.policy import Decision, PoolLoad, RequestFeatures, Unroutable
from router.pressure import PressureTracker
from router.streaming import RelayedStream, relay_usage, wants_usage
from router.validation import request_sequences

logger = logging.getLogger("specserve.router")

# The pool chosen for the request being handled; read by `_get_configured_serve_handle`, which
# Ray's `OpenAiIngress._get_response` calls in the same task.
_ROUTE: contextvars.ContextVar[Route] = contextvars.ContextVar("specserve_route")


def build_fastapi_app(server: ServerConfig) -> FastAPI:
    """FastAPI app of the ingress with OpenAI error JSON, the API keys of `server` (401 without a
    valid `Authorization: Bearer <key>`, admin keys for /admin/*, see router/auth.py) and the
    request-size limit on the bytes received (413 above `server.max_body_bytes`, see
    router/body_limit.py).

    CORS is off: a browser client needs an explicit proxy or a future config switch.
    """
    app = FastAPI(title="specserve")
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_body_bytes=server.max_body_bytes)
    app.add_middleware(ApiKeyGuard, api_keys_env=server.api_keys_env,  # outermost: keys first
                       admin_api_keys_env=server.admin_api_keys_env)
    return app


class SpecserveIngress(OpenAiIngress):
    """Ingress deployment: OpenAI endpoints over the two pools.

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
        self._handles = {pool: h.options(stream=True) for pool, h in pools.items()}
        self._wake_handles = {pool: h.options(method_name="wake") for pool, h in pools.items()}
        self._wakes: dict[Route, asyncio.Future] = {}  # pool -> its wake call in flight
        replicas = {pool: self._cfg.initial_replicas(pool) for pool in pools}
        use_serve_log_handlers()
        ctx = serve.get_replica_context()
        self._board = get_board(ctx.app_name)
        self._replica_id = ctx.replica_id.unique_id
        self._pressure = PressureTracker(self._board, self._replica_id, replicas)
        self._generation = generation
        self._decider = RouteDecider(self._cfg, pools, generation)
        self._estimator = self._decider.estimator
        self._metrics = RouterMetrics(self._pressure.pool_stats, self._estimator)
        scaling = self._cfg.autoscaling
        self._health = PoolHealth(scales_to_zero=[
            p for p in pools if scaling.enabled and scaling.pool(p).min_replicas == 0])
        loop = asyncio.get_event_loop()
        self._background = [
            loop.create_task(self._pressure.run(on_snapshot=self._observe)),
            loop.create_task(self._decider.share_forever(self._board, self._replica_id))]

    def _observe(self, snapshot) -> None:
        self._estimator.update_pools(snapshot)
        self._health.observe(snapshot, self._pressure.board_age_s)

    def _get_configured_serve_handle(self, model_id: str) -> DeploymentHandle:
        return self._handles[_ROUTE.get()]

    def _loads(self) -> dict[Route, PoolLoad]:
        """Each pool's load, live or not, with the step time it would run at with this request."""
        loads = self._estimator.with_step_times(self._pressure.loads())
        return {pool: dataclasses.replace(load, available=self._health.available(pool),
                                          asleep=self._health.asleep(pool))
                for pool, load in loads.items()}

    def _wake(self, pool: Route) -> None:
        """Makes `pool`, scaled to zero, count as demand: one `PoolServer.wake` call queued at its
        handle, as Serve counts any request waiting for a deployment at zero replicas (the
        autoscaling policy then starts one, deployments/autoscaling.py). One call per pool at a
        time; it ends when a replica answers it."""
        if pool in self._wakes and not self._wakes[pool].done():
            return
        self._metrics.observe_wake(pool)
        logger.info(json.dumps({"event": "wake", "route": pool}))

        async def call() -> None:
            try:
                await self._wake_handles[pool].remote()
            except Exception as e:  # the next request that wants the pool wakes it again
                logger.warning(json.dumps({"event": "wake_failed", "route": pool,
                                           "error": type(e).__name__}))

        self._wakes[pool] = asyncio.ensure_future(call())

    async def _wait_awake(self, pool: Route) -> float | None:
        """Wakes `pool` and waits until the StatsBoard lists a replica of it, at most
        `autoscaling.scale_from_zero_wait_s`. Seconds waited, or None on timeout."""
        self._wake(pool)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while self._health.asleep(pool):
            if loop.time() - t0 >= self._cfg.autoscaling.scale_from_zero_wait_s:
                return None
            await asyncio.sleep(PUSH_PERIOD_S)
        return loop.time() - t0

    def _retry_route(self, failed: Route, decision: Decision) -> Route:
        """Where a request goes after `failed` lost it: another pool it may run on when one is
        up, else the same pool (Serve picks another of its replicas, if any)."""
        others = [p for p in self._handles if p != failed and decision.may_run_on(p)
                  and self._health.available(p)]
        return others[0] if others else failed

    async def _forward(self, body, call_method: str, raw_request: Request | None,
                       route: Route, sequences: int) -> Response:
        """The pool's response; counts its `sequences` in flight until it ends (streams:
        RelayedStream)."""
        _ROUTE.set(route)
        self._pressure.start(route, sequences)
        try:
            response = await super()._process_llm_request(body, call_method, raw_request)
        except BaseException:
            self._pressure.finish(route, sequences)
            raise
        if not isinstance(response, StreamingResponse):
            self._pressure.finish(route, sequences)
        return response

    async def _forward_watched(self, body, call_method: str, raw_request: Request | None,
                               route: Route, sequences: int) -> Response:
        """`_forward`, abandoned with `PoolLost` if `route`'s last replica leaves the StatsBoard
        before the response begins (a stream: its first chunk). Serve's handle would hold such a
        request until a new replica starts, minutes for a vLLM engine (router/health.py); nothing
        has reached the client yet, so the caller may retry it on the other pool."""
        async def release(response: Response) -> None:
            if isinstance(response, StreamingResponse):
                self._pressure.finish(route, sequences)
                aclose = getattr(response.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()

        return await await_unless_gone(
            self._forward(body, call_method, raw_request, route, sequences), route, self._health,
            PUSH_PERIOD_S, release)

    async def _process_llm_request(self, body, call_method: str,
                                   raw_request: Request | None = None) -> Response:
        await self._get_model_id(body.model)  # 404 before any decision is counted
        prompt_len = self._decider.validate(body)  # the same validation as batch rows
        loads = self._loads()
        retry_after = {"Retry-After": str(self._cfg.server.retry_after_s)}
        if not any(load.available or load.asleep for load in loads.values()):
            return error_response(503, "No pool has a live replica; retry later",
                                  headers=retry_after)
        try:
            features, decision = self._decider.decide(body, loads, prompt_len)
        except Unroutable as e:  # forces a pool not configured, an option or a lossy pool
            raise RequestError(400, str(e), e.param) from None
        woken_after_s = None
        if loads[decision.route].asleep:  # no pool it may run on is up: wake this one, wait
            woken_after_s = await self._wait_awake(decision.route)
            if woken_after_s is None:
                return self._not_woken(decision.route, features)
            loads = self._loads()
        elif decision.reason == "pool_scaled_to_zero":  # it wanted the other pool: wake that
            for pool in loads:
                if pool != decision.route and loads[pool].asleep:
                    self._wake(pool)
        sequences = request_sequences(body)
        admitted = admit(decision, loads, self._cfg.server.max_in_flight_per_replica, sequences)
        if admitted is None:
            status, message = refusal(decision, loads)
            self._metrics.observe_decision(decision.route, "rejected_overload" if status == 429
                                           else "rejected_unavailable", features.task, None)
            return error_response(status, message,
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
        if woken_after_s is not None:
            headers["x-specserve-scaled-from-zero-s"] = f"{woken_after_s:.1f}"
        keep_usage = wants_usage(body)  # the client's choice, whichever pool ends up serving
        if body.stream and not keep_usage:
            # vLLM reports a stream's acceptance only on its final usage chunk: ask for it, learn
            # from it, and drop it before the client sees it (`relay_usage`).
            body.stream_options = StreamOptions(include_usage=True)
        for attempt in (1, 2):  # a replica failure before any output is retried once
            try:
                response = await self._forward_watched(body, call_method, raw_request, route,
                                                       sequences)
                break
            except OpenAIHTTPException as e:  # the engine refused it: say which path did
                return error_response(e.status_code, e.message, headers=headers)
            except (*REPLICA_FAILURES, PoolLost) as e:
                self._health.failed(route)
                retry = self._retry_route(route, decision)
                logger.warning(json.dumps({"event": "replica_failure", "route": route,
                                           "attempt": attempt, "error": type(e).__name__,
                                           "retry_route": retry if attempt == 1 else None}))
                if attempt == 2:
                    return error_response(503, f"The {route} pool lost the request twice; retry "
                                          "later", headers={**headers, **retry_after})
                self._metrics.observe_retry(route)
                headers["x-specserve-retried"] = "1"
                if self._health.asleep(retry):  # it scaled to zero meanwhile: wake it, wait
                    waited = await self._wait_awake(retry)
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
                                 functools.partial(self._pressure.finish, route, sequences),
                                 status_code=response.status_code, headers=dict(response.headers),
                                 media_type=response.media_type)
        if route == "speculative" and isinstance(response, JSONResponse):
            self._learn(json.loads(response.body), features)
        return response

    def _not_woken(self, pool: Route, features: RequestFeatures) -> Response:
        """503 for a request that waited `autoscaling.scale_from_zero_wait_s` for `pool`."""
        self._metrics.observe_decision(pool, "rejected_scaled_to_zero", features.task, None)
        return error_response(
            503, f"The {pool} pool is scaled to zero and started no replica within "
            f"{self._cfg.autoscaling.scale_from_zero_wait_s:g} s; retry later",
            headers={"Retry-After": str(self._cfg.server.retry_after_s),
                     "x-specserve-route": pool, "x-specserve-reason": "pool_scaled_to_zero"})

    def _learn(self, payload: dict, features: RequestFeatures) -> None:
        self._decider.learn(features, payload)

    async def _relay(self, packets, route: Route, features: RequestFeatures, keep_usage: bool):
        """Streams SSE packets through; learns from the usage event and drops it unless the
        client asked for it (`relay_usage`).

        A pool failure after the stream began cannot be retried (the client has output): the
        stream ends with an OpenAI error event and `[DONE]`, never by hanging or a cut connection.
        A client that goes away closes this generator, which cancels the pool's request (vLLM
        aborts it in the engine).
        """
        guarded = self._guarded(packets, route)
        relayed = relay_usage(guarded, keep_usage, functools.partial(self._learn,
                                                                    features=features))
        try:
            async for packet in relayed:
                yield packet
        finally:
            await relayed.aclose()
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
        within ~1 s; lost when the application is redeployed or deleted. 400 on a bad body."""
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
        await self._board.set_pin.remote(body["pin"], self._generation)
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
        pools = {p: {"replicas": load.replicas, "in_flight": load.in_flight,
                     "lossless_sampling": load.lossless_sampling}
                 for p, load in self._pressure.loads().items()}
        return {"status": "ok", "pools": pools}


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
