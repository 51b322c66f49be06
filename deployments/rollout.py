"""`specserve speculator rollout`: a candidate speculator onto the running application as a canary,
then rolled forward or back on its live acceptance.

Mechanism (Ray Serve 2.60, declarative applications only): the application is re-applied with its
deployed entry unchanged (same `import_path` and `args`, so the same code version: no rebuild, the
router and the vanilla pool keep running) plus an override of the speculative deployment's
`ray_actor_options` setting `core.rollout.CANARY_ENV`. A changed `ray_actor_options` restarts that
deployment's replicas, one rollout step at a time, each stopped gracefully (in-flight requests
finish) while the router sends its pool's requests to the other pool or replicas meanwhile; the
replica of Serve rank < `replicas` starts with the candidate checkpoint (deployments/pools.py
`PoolServer._with_canary`), passes the sampling check and profiles before it takes traffic.
On KubeRay the same override goes into the RayService's `serveConfigV2` (`deployments:` of the
application) instead, which KubeRay applies to the running cluster in place
(cluster/kube/speculator.py, `--rayservice`): an apply straight to Serve would be undone at the
CR's next change.

Steps: (1) canary: the candidate on one replica (`replicas` 1); (2) watch: the router tallies each
response's acceptance under the `system_fingerprint` of the speculator that served it
(core/rollout.py), every ingress replica publishing to the StatsBoard, which this driver reads;
`core.rollout.decide` compares candidate and incumbent per task; (3) forward: the candidate on every
replica (`replicas` null); back: the override as it was before (none, or an earlier rollout's
candidate), every replica back on the incumbent. Each
step is recorded on the board (`StatsBoard.set_rollout`): `specserve_rollout_state`,
`specserve_rollouts_total{outcome}` and the per-speculator acceptance on /metrics and the dashboard.

A rolled-forward application keeps the override until its config names the candidate
(`speculative.speculator.model`) and is deployed again.
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import ray
from ray import serve
from ray.serve.schema import ServeDeploySchema

from core import SpecserveConfig, resolve_path
from core.ray_private import get_global_client
from core.rollout import (CANARY_ENV, RolloutParams, Tally, Verdict, canary_env, decide,
                          merge_counts, speculator_fingerprint, tally_since)
from router.board import get_board

POOL = "speculative"
POLL_S = 2.0


class RolloutError(RuntimeError):
    """The rollout cannot start (bad candidate, application not declarative or not running)."""


@dataclass
class RolloutResult:
    """How a rollout ended.

    Attributes:
        outcome: "forward" or "back".
        reason: why (the verdict's, a forced decision, a failed canary, a timeout).
        incumbent, candidate: the speculators' fingerprints.
        detail: `core.rollout.decide`'s per-task comparison at the decision.
        seconds: per step (canary, watch, forward or back), wall clock.
    """

    outcome: str
    reason: str
    incumbent: str
    candidate: str
    detail: dict
    seconds: dict


def deployed_entry(app_name: str) -> tuple[dict, dict, list[dict]]:
    """The application's deployed config entry, Serve's HTTP options, and the other declarative
    applications' entries (a declarative apply replaces the whole set).

    Raises:
        RolloutError: no such application, or it was deployed with `serve.run` (imperative: no
            in-place override; deploy it declaratively: `autoscaling.enabled`, or a RayService).
    """
    details = get_global_client().get_serve_details()
    apps = details.get("applications", {})
    app = apps.get(app_name)
    if app is None:
        raise RolloutError(f"--app: no Serve application {app_name!r} (have {sorted(apps)})")
    if app.get("source") != "declarative" or not app.get("deployed_app_config"):
        raise RolloutError(f"application {app_name!r} was deployed with serve.run; a rollout "
                           "updates a declaratively deployed one in place (set "
                           "autoscaling.enabled: true, or serve it from a RayService)")
    others = [a["deployed_app_config"] for name, a in apps.items()
              if name != app_name and a.get("source") == "declarative"
              and a.get("deployed_app_config")]
    http = {k: v for k, v in (details.get("http_options") or {}).items()
            if k in ("host", "port")}
    return app["deployed_app_config"], http, others


def with_canary(entry: dict, actor_options: dict, value: str | None) -> dict:
    """`entry` with the speculative deployment's `ray_actor_options` = `actor_options` with
    `CANARY_ENV` set to `value` (None: the override removed, the build's options back)."""
    entry = copy.deepcopy(entry)
    others = [d for d in entry.get("deployments", []) if d.get("name") != POOL]
    if value is not None:
        options = copy.deepcopy(actor_options)
        env = options.setdefault("runtime_env", {}).setdefault("env_vars", {})
        env[CANARY_ENV] = value
        others.append({"name": POOL, "ray_actor_options": options})
    if others:
        entry["deployments"] = others
    else:  # no override left: the entry as built (and as cluster/kube/render.py renders it)
        entry.pop("deployments", None)
    return entry


def current_actor_options(app_name: str) -> tuple[dict, str | None]:
    """The speculative deployment's effective `ray_actor_options` without `CANARY_ENV`, and that
    variable's value in force (None: the config's speculator serves)."""
    details = get_global_client().get_serve_details()
    deployment = details["applications"][app_name]["deployments"].get(POOL)
    if deployment is None:
        raise RolloutError(f"application {app_name!r} has no {POOL} pool")
    options = copy.deepcopy(deployment["deployment_config"].get("ray_actor_options") or {})
    env = (options.get("runtime_env") or {}).get("env_vars") or {}
    return options, env.pop(CANARY_ENV, None)


Applier = Callable[[str | None], None]


def apply(app_name: str, value: str | None) -> None:
    """Re-applies the application with the canary override `value` (None: removed), straight to
    Serve (the default `Applier`)."""
    entry, http, others = deployed_entry(app_name)
    options, _ = current_actor_options(app_name)
    get_global_client().deploy_apps(ServeDeploySchema(
        http_options=http, applications=[*others, with_canary(entry, options, value)]))


def live_speculators(board) -> dict[str, dict]:
    """The speculative pool's live replicas: {replica id: {"speculator", "lossless_sampling"}}."""
    return {rid: r for rid, r in ray.get(board.replica_speculators.remote()).items()
            if r["pool"] == POOL}


def wait_replicas(board, app_name: str, ready: Callable[[dict[str, dict]], bool],
                  timeout_s: float, restarted: set[str] = frozenset()) -> bool:
    """Polls the board until `ready(live_speculators)` with none of the replicas in `restarted`
    (the ids live before an apply that restarts them all) still listed; False on timeout or when
    the application turns DEPLOY_FAILED / UNHEALTHY (a candidate vLLM cannot load)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = live_speculators(board)
        if ready(live) and not restarted & live.keys():
            return True
        status = serve.status().applications.get(app_name)
        if status is not None and status.status in ("DEPLOY_FAILED", "UNHEALTHY"):
            return False
        time.sleep(POLL_S)
    return False


def check_candidate(cfg: SpecserveConfig, candidate: str) -> tuple[str, dict]:
    """The candidate's resolved path and the config's vLLM `speculative_config`.

    Raises:
        RolloutError: not a checkpoint folder, or the config's speculator has no checkpoint.
    """
    path = resolve_path(candidate)
    if not (Path(path) / "config.json").is_file():
        raise RolloutError(f"--candidate: {candidate!r} is not a checkpoint folder with a "
                           "config.json")
    spec = cfg.speculative.speculator.to_vllm() if cfg.speculative else None
    if not spec or "model" not in spec:
        raise RolloutError("speculative.speculator.method: a rollout replaces a speculator "
                           "checkpoint (eagle3, medusa, draft_model); n-gram has none")
    return path, spec


def run_rollout(cfg: SpecserveConfig, app_name: str, candidate: str, params: RolloutParams,
                decision: str = "auto", canary_timeout_s: float = 900.0,
                watch_timeout_s: float = 600.0, log: Callable[[dict], None] = print,
                incumbent_since: Mapping[str, Tally] | None = None,
                applier: Applier | None = None) -> RolloutResult:
    """Canary, watch, then forward or back (module docstring). Needs `ray.init` on the cluster.
    Interrupted (KeyboardInterrupt) after the canary started, it rolls back before returning.

    Args:
        candidate: the candidate checkpoint folder (vLLM's layout, readable by every worker).
        decision: "auto" (`core.rollout.decide`), or "forward" / "back" once the canary is live
            (an operator's call; also how a roll-back is exercised).
        canary_timeout_s: longest wait for the canary replica to serve (else back), and for the
            replicas' restart when rolling forward or back.
        watch_timeout_s: longest wait for enough live acceptance to decide (else back).
        log: called with one JSON-able event per step.
        incumbent_since: the incumbent's cumulative tallies per task at the start of the window
            its evidence is counted over (the loop passes the drift window's start, so traffic
            from before the drift does not count); None: since the router replicas started.
        applier: puts an override value in force (default: `apply` to this cluster's Serve;
            on KubeRay `cluster.kube.speculator.RayServiceOverride`, through the RayService).

    Raises:
        RolloutError: the candidate is not a checkpoint folder, the application cannot be updated
            in place, or its speculative pool has no live replica to compare against.
    """
    import vllm

    path, spec = check_candidate(cfg, candidate)
    deployed_entry(app_name)  # declarative, or refuse before touching anything
    board = get_board(app_name)
    live = live_speculators(board)
    if not live:
        raise RolloutError(f"application {app_name!r}: no live {POOL} replica on its StatsBoard")
    incumbent = Counter(r["speculator"] for r in live.values()).most_common(1)[0][0]
    cand_fp = speculator_fingerprint(POOL, {**spec, "model": path}, vllm.__version__)
    if cand_fp == incumbent:
        raise RolloutError(f"--candidate: the {POOL} pool already serves {cand_fp}")
    # what a roll-back restores: an earlier rollout's candidate, if one was rolled forward
    _, previous = current_actor_options(app_name)
    rollout = _Rollout(board, app_name, path, incumbent, cand_fp, previous, canary_timeout_s, log,
                       applier or (lambda value: apply(app_name, value)), incumbent_since)
    try:
        return rollout.canary_then_decide(params, decision, watch_timeout_s)
    except KeyboardInterrupt:  # never leave the candidate half rolled out
        return rollout.finish("back", "interrupted (Ctrl-C / SIGTERM) during the canary", {})


@dataclass
class _Rollout:
    """One rollout's state: where it applies, what it compares, how long each step took."""

    board: object
    app_name: str
    path: str
    incumbent: str
    candidate: str
    previous: str | None  # the `CANARY_ENV` value before the canary (None: none)
    restart_timeout_s: float
    log: Callable[[dict], None]
    applier: Applier
    incumbent_since: Mapping[str, Tally] | None = None
    seconds: dict = field(default_factory=dict)

    def step(self, state: str, **extra) -> None:
        """Records a step on the board (metrics, /admin/speculators) and logs it."""
        event = {"state": state, "candidate": self.candidate, "incumbent": self.incumbent,
                 **extra}
        ray.get(self.board.set_rollout.remote(event))
        self.log({"event": "rollout", **event})

    def finish(self, outcome: Verdict, reason: str, detail: dict) -> RolloutResult:
        """Rolls forward (the candidate on every replica) or back (the override as it was
        before the canary) and waits for the speculative pool's replicas to serve it."""
        t0 = time.monotonic()
        before = set(live_speculators(self.board))  # a changed override restarts every replica
        if outcome == "forward":
            self.applier(canary_env(self.path, None))
            done = lambda r: bool(r) and all(  # noqa: E731
                x["speculator"] == self.candidate for x in r.values())
        else:
            self.applier(self.previous)
            done = lambda r: bool(r) and all(  # noqa: E731
                x["speculator"] != self.candidate for x in r.values())
        ok = wait_replicas(self.board, self.app_name, done, self.restart_timeout_s, before)
        self.seconds[outcome] = time.monotonic() - t0
        self.step(outcome, reason=reason, detail=detail, replicas_updated=ok)
        return RolloutResult(outcome, reason, self.incumbent, self.candidate, detail,
                             self.seconds)

    def canary_then_decide(self, params: RolloutParams, decision: str,
                           watch_timeout_s: float) -> RolloutResult:
        """The canary and watch steps, ending in `finish(verdict, ...)`."""
        t0 = time.monotonic()
        self.step("canary", reason="starting")
        self.applier(canary_env(self.path, 1))
        up = wait_replicas(self.board, self.app_name, lambda r: any(
            x["speculator"] == self.candidate for x in r.values()), self.restart_timeout_s)
        self.seconds["canary"] = time.monotonic() - t0
        if not up:
            return self.finish("back", "the canary replica did not serve within "
                               f"{self.restart_timeout_s:.0f} s (see the Serve controller log: "
                               "vLLM could not load it?)", {})
        unchecked = [rid for rid, r in live_speculators(self.board).items()
                     if r["speculator"] == self.candidate and not r["lossless_sampling"]]
        if unchecked:
            return self.finish("back", f"the canary replica(s) {unchecked} failed the sampling "
                               "check", {})
        self.step("canary", reason="serving")
        if decision in ("forward", "back"):
            return self.finish(decision, f"decided by the operator ({decision})", {})
        t0 = time.monotonic()
        verdict, detail = "wait", {}
        while time.monotonic() < t0 + watch_timeout_s:
            state = ray.get(self.board.router_state.remote("", None))
            tallies = merge_counts(state.speculators)
            incumbent = tallies.get(self.incumbent, {})
            if self.incumbent_since is not None:
                incumbent = tally_since(incumbent, self.incumbent_since)
            verdict, detail = decide(incumbent, tallies.get(self.candidate, {}), params)
            if verdict != "wait":
                break
            time.sleep(POLL_S)
        self.seconds["watch"] = time.monotonic() - t0
        if verdict == "wait":
            return self.finish("back", f"no task reached {params.min_steps} verification steps "
                               f"on both speculators within {watch_timeout_s:.0f} s", detail)
        reason = (f"regressed on {', '.join(detail['regressed'])}" if detail["regressed"] else
                  f"live mean acceptance length {detail['ratio']:.3f}x the incumbent's")
        return self.finish(verdict, reason, detail)


def add_cluster_arguments(p) -> None:
    """`--app` and `--address`, as every command driving a running application takes them."""
    p.add_argument("--app", default="specserve", help="Serve application name")
    p.add_argument("--address", default="auto", help="Ray cluster address")


def connect(address: str) -> None:
    """A quiet Ray driver on the cluster at `address`.

    Raises:
        RolloutError: no Ray cluster there (names `--address`).
    """
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except ConnectionError as e:
        raise RolloutError(f"--address {address}: {e}") from None
