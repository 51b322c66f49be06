"""The ingress's /admin/* endpoints: the runtime pin (`GET`/`PUT /admin/policy`), the profiled
speedup model (`GET /admin/speedup`) and the step-time samples behind it
(`GET /admin/step_samples`), what the autoscaling policy decides from
(`GET /admin/autoscaling`), the speculators' live acceptance (`GET /admin/speculators`) and
every engine's prefix cache dropped (`POST /admin/reset_prefix_cache`). Only admin keys reach them
when `server.admin_api_keys_env` is set (router/auth.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import get_args

from fastapi import Request
from starlette.responses import JSONResponse, Response

from core import SpecserveConfig, TaskType
from core import ray_private
from router.decider import RouteDecider
from router.errors import error_response

logger = logging.getLogger("specserve.router")
RESET_TIMEOUT_S = 60.0  # POST /admin/reset_prefix_cache: per pool, every replica's answer


class AdminEndpoints:
    """Mixin of `router.ingress.SpecserveIngress`: its `_decider`, `_board` (the StatsBoard),
    `_generation` (the application build) and `_cfg` serve these endpoints."""

    _decider: RouteDecider
    _cfg: SpecserveConfig
    _generation: str
    _handles: dict  # pool -> its DeploymentHandle

    async def reset_prefix_cache(self) -> Response:
        """Drops the KV prefix cache of every replica of every pool (vLLM's
        `reset_prefix_cache`; Ray Serve LLM's dev ingress and vLLM's dev mode serve the same as
        `POST /reset_prefix_cache`), so that a benchmark cell does not reuse the prompts an
        earlier cell left cached: `bench.run` calls it before every cell.

        Returns 200 `{"pools": {pool: {"replicas": n, "reset": n}}}` when every live replica
        dropped its cache; 409 (OpenAI error JSON) when one refused because a request still held
        KV blocks (vLLM resets only an idle cache; the requests are not touched: retry when
        idle); 503 when a pool's replicas did not answer within `RESET_TIMEOUT_S`."""
        out = {}
        for pool, handle in self._handles.items():
            try:  # broadcast blocks (ray.get): off the event loop
                answers = await asyncio.wait_for(asyncio.to_thread(
                    ray_private.broadcast, handle, "reset_prefix_cache"), RESET_TIMEOUT_S)
            except Exception as e:  # a dead replica's error, or none answering in time
                return error_response(503, f"{pool} pool: its replicas did not reset their "
                                      f"prefix cache ({type(e).__name__}: {e})")
            out[pool] = {"replicas": len(answers), "reset": sum(bool(a) for a in answers)}
        logger.info(json.dumps({"event": "reset_prefix_cache", "pools": out}))
        busy = [p for p, r in out.items() if r["reset"] < r["replicas"]]
        if busy:
            return error_response(409, f"{' and '.join(busy)} pool: a replica holds running "
                                  "requests, and vLLM resets only an idle prefix cache; retry "
                                  "when idle (the other replicas were reset)")
        return JSONResponse({"pools": out})

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

    async def get_speedup(self, request: Request) -> Response:
        """The profiled S(B) curve per task type (see `SpeedupModel.curve`) at the query's
        `temperature` (default 0: E[τ] depends on it), with where S reaches `router.min_speedup`:
        "pays_at_batches", every curve batch where it does, and "pays_up_to_batch", the largest
        B such that it does at every curve batch from 1 to B (0: not even at batch 1; a curve
        can pay again at a larger batch, which only "pays_at_batches" shows). The optional
        `context` (tokens per sequence, ≥ 0) prices every batch at that mean context (default:
        each pool's profile context); "context_cost" gives each pool's κ (seconds per step per
        sequence per context token) and the context its profile ran at (core/step_time.py);
        "host_sharing" each pool's measured slowdown ρ while the other is busy, the load
        allocation in force and the decode rates it was chosen from (router/policy.py
        `allocate`), the per-request rule's speculative share and the mix's E[τ]. 400
        when `temperature` is not a number in [0, 2] (OpenAI's range) or `context` is not a
        finite number ≥ 0."""
        raw = request.query_params.get("temperature", "0")
        temperature = _number(raw)
        if not 0.0 <= temperature <= 2.0:
            return error_response(400, f"temperature: expected a number in [0, 2], got {raw!r}",
                                  param="temperature")
        raw_context = request.query_params.get("context")
        context = None
        if raw_context is not None:
            context = _number(raw_context)
            if not (math.isfinite(context) and context >= 0):
                return error_response(400, "context: expected a number of tokens >= 0, got "
                                      f"{raw_context!r}", param="context")
        model = self._decider.speedup_model
        out = {}
        for task in get_args(TaskType):
            rows = model.curve(task, temperature, context)
            pays = [r["batch"] for r in rows if r["speedup"] >= self._cfg.router.min_speedup]
            out[task] = {"pays_up_to_batch": pays_up_to(rows, pays), "pays_at_batches": pays,
                         "curve": rows}
        costs = {pool: {"context_s_per_token": m.context_s, "profile_context": m.ref_context}
                 for pool, m in model.step_times.items()}
        decider = self._decider
        sharing = {"slowdown": {p: round(r, 3) for p, r in
                                model.host_sharing.slowdowns().items()},
                   "allocation": decider.allocation,
                   "predicted_tokens_per_s": {a: round(r, 1) for a, r in
                                              decider.allocation_rates.items()},
                   "speculative_share": round(decider.load_mix.speculative_share, 3),
                   "mix_expected_tokens": round(decider.load_mix.expected_tokens, 3)}
        return JSONResponse({"min_speedup": self._cfg.router.min_speedup,
                             "temperature": temperature, "context": context,
                             "context_cost": costs, "host_sharing": sharing, "tasks": out})

    async def get_step_samples(self, request: Request) -> Response:
        """The newest step-time samples this replica's router folded into its pools' step-time
        models (`SpeedupModel.recent_samples`: at most `router.policy.RECENT_SAMPLES`, oldest
        first), after the query's `since` (Unix seconds, default 0): what set each step time
        `GET /admin/speedup` shows. 400 when `since` is not a finite number."""
        raw = request.query_params.get("since", "0")
        since = _number(raw)
        if not math.isfinite(since):
            return error_response(400, f"since: expected a time in Unix seconds, got {raw!r}",
                                  param="since")
        return JSONResponse({"samples": self._decider.speedup_model.recent_samples(since)})

    async def get_speculators(self) -> dict:
        """Live acceptance per speculator and task, over every ingress replica, and the rollout
        state (core/rollout.py): `{"speculators": {fingerprint: {task: {"requests", "steps",
        "accepted", "mean_acceptance_length"}}}, "rollout": {...}}`. A fingerprint is the
        `system_fingerprint` of the responses its replicas served. The other replicas' tallies and
        the rollout state are this replica's last read of the StatsBoard, taken every
        `core.stats.PUSH_PERIOD_S` (0.5 s): a step just recorded shows within a period or two."""
        tallies = self._decider.speculator_tallies()
        return {"speculators": {
                    fp: {task: {"requests": t.requests, "steps": t.steps, "accepted": t.accepted,
                                "mean_acceptance_length": t.mean_acceptance_length}
                         for task, t in by_task.items()}
                    for fp, by_task in tallies.items()},
                "rollout": self._decider.rollout}

    async def get_autoscaling(self) -> dict:
        """The autoscaling policy's view from the StatsBoard: `policy` (rules | budget), its
        `calls` and last decision `events` (each with its reason and predicted gain), and the
        `inputs` the budget split takes (offered load per class over `demand_window_s`, each
        pool's step-time model; router/board.py `autoscaling_inputs`)."""
        scaling = self._cfg.autoscaling
        log = await self._board.autoscaler.remote()
        inputs = await self._board.autoscaling_inputs.remote(
            scaling.demand_window_s, {p: getattr(self._cfg, p).max_num_seqs
                                      for p in self._cfg.pools()})
        return {"enabled": scaling.enabled, "policy": scaling.policy, "calls": log["calls"],
                "events": log["events"][-50:], "inputs": inputs}


def pays_up_to(rows: list[dict], pays: list[int]) -> int:
    """The largest curve batch B with S ≥ min_speedup at every curve batch ≤ B (0: none).

    Args:
        rows: the S(B) curve, ascending batch (`SpeedupModel.curve`).
        pays: the batches of `rows` at which speculation pays.
    """
    last = 0
    for r in rows:
        if r["batch"] not in pays:
            break
        last = r["batch"]
    return last


def _number(raw: str) -> float:
    """A query parameter's value as a float; NaN where it is not a number (each caller's range
    check then refuses it with a 400 naming the parameter)."""
    try:
        return float(raw)
    except ValueError:
        return float("nan")
