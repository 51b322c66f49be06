"""The route decision with its online state: the one object the HTTP ingress and the batch driver
decide through.

`RouteDecider` turns a request body into a `RouteDecision`: its features (router/features.py), each
pool's load (router/pool_view.py), the expected speedup S (router/speedup.py, priced by latency at
the ingress and by throughput in a batch job), then the pure `router.policy.choose_route` and
`admit`. It keeps what the decision learns from: per-task hysteresis memory, acceptance estimates
folded from speculative responses, step times from the StatsBoard, and the runtime pin
(`PUT /admin/policy`). Ingress replicas and batch drivers share the pin and their acceptance
counts through the application's StatsBoard (`run`), so one admin call or one replica's
observations reach every replica within ~1 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Callable, Iterable, get_args

from core import (PUSH_PERIOD_S, ArrivalCounter, PoolStats, RequestedRoute, Route,
                  SpecserveConfig, TaskType, read_config_value, resolve_path)
from router.features import load_tokenizer, max_prompt_tokens, prompt_tokens, request_features
from router.policy import PoolLoad, RequestFeatures, RouteDecision, admit, choose_route
from router.pool_view import PoolHealth, PressureTracker
from router.speedup import SPEEDUP_MODELS, PricingMode
from router.validation import Limits, request_sequences, validate_request

logger = logging.getLogger("specserve.router")
PINS = get_args(RequestedRoute)  # "auto", "speculative", "vanilla"


class RouteDecider:
    """Per-request route decisions for one application.

    Args:
        cfg: the application's config.
        pools: the pools the application runs ("vanilla", "speculative" or both).
        generation: the application build's id (deployments/app.py): the runtime pin on the
            StatsBoard holds within one build. None (a batch driver): it follows the pin of the
            application's newest build and never writes one.
        board: the application's StatsBoard actor (None: local counts only, no step times).
        replica_id: this ingress replica's (or batch driver's) id on the board.
        pricing: how S prices the pools (router/speedup.py): "latency" for a request a user
            waits for, "throughput" for a batch job's rows.
        health: the pools' availability (the ingress's); None: every pool counts as available.
    """

    def __init__(self, cfg: SpecserveConfig, pools: Iterable[Route],
                 generation: str | None = "", board=None, replica_id: str = "",
                 pricing: PricingMode = "latency", health: PoolHealth | None = None):
        self.cfg = cfg
        self.pools = list(pools)
        self.generation = generation
        self.board, self.replica_id = board, replica_id
        self._board_epoch: str | None = None  # at the last board read: another is a restart
        self.speedup_model = SPEEDUP_MODELS[pricing](
            cfg.speculative.speculator.num_speculative_tokens,
            {p: getattr(cfg, p).max_num_seqs for p in self.pools})
        self.pressure = PressureTracker(board, replica_id,
                                        {p: cfg.initial_replicas(p) for p in self.pools})
        self.health = health
        self.tokenizer = load_tokenizer(resolve_path(cfg.model.path))
        # Tokens of context the speculator drafts within (None: unbounded or no speculative pool).
        self.speculator_context = (cfg.speculative.speculator.context_len()
                                   if "speculative" in self.pools else None)
        # What the engines accept (router/validation.py), for every caller of `validate`.
        self.limits = Limits(cfg.model.max_model_len,
                             read_config_value(cfg.model.path, "vocab_size"), cfg.server.max_n,
                             cfg.server.max_sequences_per_request)
        self._last_auto_route: dict[TaskType, Route] = {}  # per task type, for hysteresis
        self._runtime_pin: str | None = None  # None: the config's router.pin
        self._pin_version = 0  # bumped by set_pin: a board read that spans it is stale
        self.arrivals = ArrivalCounter()  # offered load per class, for the autoscaling policy

    @property
    def pin(self) -> str:
        """The pin in force: the runtime one if set, else the config's `router.pin`."""
        return self._runtime_pin or self.cfg.router.pin

    @property
    def pin_source(self) -> str:
        """"runtime" when the admin endpoint set the pin in force, else "config"."""
        return "config" if self._runtime_pin is None else "runtime"

    def set_pin(self, pin: str | None) -> None:
        """Pins `auto` requests to a path ("auto" unpins); None returns to the config's pin.

        Raises:
            ValueError: `pin` is not None, "auto", "speculative" or "vanilla", or names a pool the
                application does not run.
        """
        if pin is not None and pin not in PINS:
            raise ValueError(f"pin: must be one of {list(PINS)} or null, got {pin!r}")
        if pin not in (None, "auto") and pin not in self.pools:
            raise ValueError(f"pin: pool {pin!r} is not configured")
        self._runtime_pin = pin
        self._pin_version += 1

    def prompt_len(self, body) -> int:
        """The prompt's length in target tokens where a limit depends on it, else a byte bound
        (router.features.max_prompt_tokens) already within every limit: short prompts, the
        common case, skip the tokenizer."""
        bound = max_prompt_tokens(body)
        max_tokens = _max_tokens(body) or 1
        context = self.speculator_context
        if bound + max_tokens <= self.cfg.model.max_model_len and (context is None
                                                                  or bound < context):
            return bound
        return prompt_tokens(body, self.tokenizer)

    def validate(self, body) -> int:
        """The online validation (`router.validation.validate_request`) of one request, as the
        ingress and the batch driver both run it before deciding.

        Returns:
            The prompt's length in tokens (`prompt_len`), for `decide`.

        Raises:
            RequestError: 400 naming the field.
        """
        prompt_len = self.prompt_len(body)
        validate_request(body, prompt_len, self.limits)
        return prompt_len

    def loads(self) -> dict[Route, PoolLoad]:
        """Each configured pool's live replicas, sequences in flight (every ingress replica and
        batch driver) and availability."""
        loads = self.pressure.loads()
        if self.health is None:
            return loads
        return {pool: dataclasses.replace(load, available=self.health.available(pool),
                                          asleep=self.health.asleep(pool))
                for pool, load in loads.items()}

    def decide(self, body, loads: dict[Route, PoolLoad] | None = None,
               prompt_len: int | None = None) -> tuple[RequestFeatures, RouteDecision]:
        """Features and route of one request (pops the body's `route` field).

        Args:
            body: an OpenAI CompletionRequest or ChatCompletionRequest (vLLM's pydantic models).
            loads: each configured pool's load; None: `loads()`.
            prompt_len: the prompt's tokens if known (or an upper bound below the speculator's
                context); None: counted here when it matters.

        Raises:
            RequestError: the `route` field is invalid (400).
            Unroutable: no pool the application runs may take the request (a forced pool
                it does not run, or `min_p` / `logit_bias` forced onto the speculative pool).
        """
        loads = self.loads() if loads is None else loads
        features = request_features(body, self.tokenizer, self.speculator_context, prompt_len)
        features = dataclasses.replace(features, expected_tokens=self.speedup_model
                                       .expected_tokens(features.task, features.temperature))
        router_cfg = self.cfg.router
        if self.pin != router_cfg.pin:
            router_cfg = router_cfg.model_copy(update={"pin": self.pin})
        decision = choose_route(features, loads, router_cfg,
                                self._last_auto_route.get(features.task),
                                self.speedup_model.speedup(features, loads))
        if decision.reason in ("speculation_pays", "speculation_costs"):  # S chose the route
            self._last_auto_route[features.task] = decision.route
        self._count_arrival(body, features, decision, prompt_len, router_cfg)
        return features, decision

    def _count_arrival(self, body, features: RequestFeatures, decision: RouteDecision,
                       prompt_len: int | None, router_cfg) -> None:
        """Counts the request for the autoscaling policy (core/arrivals.py): its class may go
        speculative unless something keeps it vanilla whatever the load (its options, a pin or
        requested route, a temperature above the cap, a prompt past the speculator's context)."""
        max_tokens = _max_tokens(body)
        gains = ("speculative" in self.pools and decision.may_run_on("speculative")
                 and "vanilla" not in (features.requested_route, router_cfg.pin)
                 and not features.beyond_speculator_context
                 and features.temperature <= router_cfg.max_speculative_temperature)
        tokens = max_tokens or self.cfg.model.max_model_len - (prompt_len or 0)
        self.arrivals.observe(features.task, gains, tokens * request_sequences(body),
                              features.expected_tokens or 1.0)

    def admit(self, decision: RouteDecision, loads: dict[Route, PoolLoad], sequences: int = 1
              ) -> RouteDecision | None:
        """`router.policy.admit` within `server.max_in_flight_per_replica`: the decision, maybe
        moved to another pool with room; None when no pool it may take has room."""
        return admit(decision, loads, self.cfg.server.max_in_flight_per_replica, sequences)

    def retry_route(self, failed: Route, decision: RouteDecision) -> Route:
        """Where a request goes after `failed` lost it: another pool it may run on when one is
        available, else the same pool (Serve picks another of its replicas, if any)."""
        others = [p for p in self.pools if p != failed and decision.may_run_on(p)
                  and (self.health is None or self.health.available(p))]
        return others[0] if others else failed

    def learn(self, features: RequestFeatures, payload: dict) -> None:
        """Folds a speculative response's `metrics.speculative_decoding.acceptance_histogram`
        (vLLM engine flag `per_request_spec_decode_metrics`) into the acceptance estimates.

        vLLM counts only the verification steps that carried drafts (scheduler.py, `observe` under
        `scheduled_spec_token_ids`); an n-gram speculator with no match, or a sequence beyond the
        speculator's context, decodes one token per step uncounted. The policy divides E[τ] by the
        pool's mean step time over all steps, so those steps enter as steps accepting nothing:
        with h the histogram and n the completion tokens, decode steps without drafts =
        n − 1 (the prefill's token) − Σ_j (j + 1)·h[j].
        """
        spec = (payload.get("metrics") or {}).get("speculative_decoding")
        if not spec or not spec.get("acceptance_histogram"):
            return
        histogram = list(spec["acceptance_histogram"])
        tokens = (payload.get("usage") or {}).get("completion_tokens")
        if tokens:
            histogram[0] += max(0, tokens - 1 - sum((j + 1) * h for j, h in enumerate(histogram)))
        self.speedup_model.acceptance.observe(features.task, features.temperature, histogram)

    async def run(self, on_snapshot: Callable[[], None] | None = None,
                  on_state: Callable[[], None] | None = None) -> None:
        """Until cancelled: the pool view's exchange with the StatsBoard (`PressureTracker.run`,
        folding each snapshot into step times and health) and `share_forever`; local counts
        only without a board.

        Args:
            on_snapshot: called after each pool snapshot was folded in.
            on_state: called after each router-state exchange (`share_forever`).
        """
        if self.board is None:
            return
        def observe(snapshot: dict[str, PoolStats]) -> None:
            self.speedup_model.update_pools(snapshot)
            if self.health is not None:
                self.health.observe(snapshot, self.pressure.board_age_s)
            if on_snapshot is not None:
                on_snapshot()
        await asyncio.gather(self.pressure.run(on_snapshot=observe),
                             self.share_forever(self.board, self.replica_id, on_state))

    async def share_forever(self, board, replica_id: str,
                            on_state: Callable[[], None] | None = None) -> None:
        """Every `PUSH_PERIOD_S`: publishes this replica's acceptance and arrival counts to the
        StatsBoard and takes the runtime pin of this build and the other replicas' counts from
        it; puts the pin back on a board that restarted without it (cancel to stop).

        Args:
            board: the application's StatsBoard actor.
            replica_id: this replica's (or batch driver's) id on the board.
            on_state: called after each exchange that reached the board.
        """
        while True:
            try:
                board.report_acceptance.remote(replica_id,
                                               self.speedup_model.acceptance.local_counts())
                board.report_arrivals.remote(replica_id, self.arrivals.age_s(),
                                             self.arrivals.counts())
                version = self._pin_version
                state = await board.router_state.remote(replica_id, self.generation)
                restarted = self._board_epoch not in (None, state.board_epoch)
                self._board_epoch = state.board_epoch
                if version == self._pin_version:  # no set_pin meanwhile: the board is current
                    if (restarted and state.pin is None and self._runtime_pin is not None
                            and self.generation is not None):
                        board.set_pin.remote(self._runtime_pin, self.generation)  # it lost it
                    else:
                        self._runtime_pin = state.pin
                self.speedup_model.acceptance.set_remote(state.acceptance)
                if on_state is not None:
                    on_state()
            except Exception:  # the board restarts on failure; keep the last state meanwhile
                logger.exception("stats board unreachable")
            await asyncio.sleep(PUSH_PERIOD_S)


def _max_tokens(body) -> int | None:
    """The request's output-token limit: `max_completion_tokens` (chat) or `max_tokens`; None
    when unset (the engine's limit applies)."""
    return getattr(body, "max_completion_tokens", None) or body.max_tokens


def route_headers(features: RequestFeatures, decision: RouteDecision) -> dict[str, str]:
    """The response headers that explain a decision: route, reason, task and (when computed) S."""
    headers = {"x-specserve-route": decision.route, "x-specserve-reason": decision.reason,
               "x-specserve-task": features.task}
    if decision.speedup is not None:
        headers["x-specserve-speedup"] = f"{decision.speedup:.2f}"
    return headers
