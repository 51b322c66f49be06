"""`specserve speculator loop`: capture -> retrain -> rollout, started by the config's
`retrain_loop.trigger` (manual, drift, schedule; core/capture_config.py `RetrainLoopConfig`).

A driver on the cluster (`python -m cluster.cli speculator loop --config my.yaml`, or the same
through `ray job submit`). Every `poll_s` it reads the router's live acceptance of the speculator
the pool serves (the StatsBoard's per-speculator tallies, core/rollout.py) and keeps their history;
when the trigger fires (`--once` fires at once) and the capture store holds `min_captured_rows`,
it retrains the serving head on the captured traffic (models/retrain.py, its gate included) and,
when the gate promotes a candidate, rolls it out as a canary (deployments/rollout.py), forward or
back. Each step is one JSON line on stdout and, for the rollout, on the board (metrics, dashboard).
The serving head is the one the pool serves now: the config's, or an earlier rollout's candidate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping

import ray

from cluster.kube import speculator as kube_speculator
from core import SpecserveConfig, load_config, resolve_path
from core.capture_store import CaptureStore
from core.rollout import (RolloutParams, Tally, drifted_tasks, merge_counts, parse_canary,
                          snapshot_at)
from deployments.rollout import (Applier, RolloutError, add_cluster_arguments, connect,
                                 current_actor_options, live_speculators, run_rollout)
from router.board import get_board


def serving_config(cfg: SpecserveConfig, app_name: str) -> SpecserveConfig:
    """`cfg` with `speculative.speculator.model` = the checkpoint every speculative replica
    serves now (an earlier rollout rolled forward), else `cfg` itself."""
    _, override = current_actor_options(app_name)
    if override is None:
        return cfg
    model, replicas = parse_canary(override)
    if replicas is not None:  # a canary still on some replicas: the incumbent is the config's
        return cfg
    data = cfg.model_dump(mode="json")
    data["speculative"]["speculator"]["model"] = model
    return SpecserveConfig.from_dict(data)


def trigger_reason(trigger: str, history: list[tuple[float, dict[str, Tally]]], now: float,
                   last_run: float, cfg) -> str | None:
    """Why the loop runs now (None: it does not): drift on some tasks, or the schedule is due.

    Args:
        trigger: `retrain_loop.trigger`.
        history: (time, the serving speculator's cumulative tallies per task), oldest first.
        now, last_run: monotonic seconds; `last_run` the loop's start or last run.
        cfg: the `retrain_loop:` block.
    """
    if trigger == "schedule" and now - last_run >= cfg.schedule_s:
        return f"schedule: {now - last_run:.0f} s since the last run"
    if trigger == "drift":
        drift = drifted_tasks(history, now, cfg.drift_window_s, cfg.baseline_window_s,
                              cfg.drift_ratio, cfg.drift_min_steps)
        if drift:
            return "drift: " + ", ".join(
                f"{task} mean acceptance length {r:.2f} against {b:.2f}"
                for task, (r, b) in sorted(drift.items()))
    return None


def run_once(cfg: SpecserveConfig, app_name: str, reason: str, rollout: RolloutParams,
             log: Callable[[dict], None], params=None, out_root: Path | None = None,
             incumbent_since: Mapping[str, Tally] | None = None,
             applier: Applier | None = None) -> str:
    """One retrain and, when promoted, one rollout. Returns "skipped" (too few rows), "refused"
    (the gate), "forward" or "back".

    Args:
        params: the retrain's `models.retrain.RetrainParams` (default: its defaults with
            `retrain_loop.retrain_steps`).
        out_root: where the candidate goes (default: `retrain_loop.heads_dir`, else beside the
            serving head).
        incumbent_since, applier: passed to `run_rollout` (the window the incumbent is judged
            on; how an override is put in force: on KubeRay through the RayService).
    """
    from models.retrain import RetrainError, RetrainParams, retrain

    loop = cfg.retrain_loop
    params = params or RetrainParams(steps=loop.retrain_steps)
    if out_root is None and loop.heads_dir is not None:
        out_root = Path(resolve_path(loop.heads_dir))
    rows = CaptureStore(cfg.capture).usage().rows
    if rows < loop.min_captured_rows:
        log({"event": "loop", "step": "skipped", "reason": reason, "captured_rows": rows,
             "min_captured_rows": loop.min_captured_rows})
        return "skipped"
    serving = serving_config(cfg, app_name)
    log({"event": "loop", "step": "retrain", "reason": reason, "captured_rows": rows,
         "serving": serving.speculative.speculator.model})
    try:
        report = retrain(serving, params, out_root)
    except RetrainError as e:
        log({"event": "loop", "step": "refused", "why": str(e)})
        return "refused"
    if not report["promoted"]:
        log({"event": "loop", "step": "refused", "why": report["gate"]["why_not"]})
        return "refused"
    log({"event": "loop", "step": "rollout", "candidate": report["path"], "gate": report["gate"],
         "retrain_wall_s": report["wall_s"]})
    result = run_rollout(serving, app_name, report["path"], rollout, log=log,
                         incumbent_since=incumbent_since, applier=applier)
    return result.outcome


def run_loop(cfg: SpecserveConfig, app_name: str, once: bool, rollout: RolloutParams,
             log: Callable[[dict], None] = print, clock=time.monotonic, params=None,
             out_root: Path | None = None, applier: Applier | None = None) -> str | None:
    """Polls until stopped (or one run with `once`); returns the last run's outcome with `once`.
    A drift-triggered rollout judges the incumbent on the drift window only (its tallies from
    before the drift would flatter it); `params`, `out_root`, `applier`: `run_once`'s."""
    loop = cfg.retrain_loop
    board = get_board(app_name)
    history: list[tuple[float, dict[str, Tally]]] = []
    serving_fp, last_run = None, clock()
    while True:
        live = live_speculators(board)
        fp = Counter(r["speculator"] for r in live.values()).most_common(1)[0][0] if live else None
        if fp != serving_fp:  # a new speculator serves: its own history from here
            serving_fp, history = fp, []
        now = clock()
        tallies = merge_counts(ray.get(board.router_state.remote("", None)).speculators)
        history.append((now, tallies.get(fp, {}) if fp else {}))
        history = [h for h in history if h[0] >= now - loop.baseline_window_s - loop.poll_s]
        reason = "--once" if once else trigger_reason(loop.trigger, history, now, last_run, loop)
        if reason:
            since = (snapshot_at(history, now - loop.drift_window_s)
                     if reason.startswith("drift") else None)
            outcome = run_once(cfg, app_name, reason, rollout, log, params, out_root, since,
                               applier)
            last_run = clock()
            if once:
                return outcome
        time.sleep(loop.poll_s)


def main(argv: list[str] | None = None) -> int:
    """`specserve speculator loop`; with `--once`, exit 0 rolled forward, 1 anything else
    (skipped, refused, rolled back), 2 bad input."""
    p = argparse.ArgumentParser(prog="specserve speculator loop", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", required=True, default=argparse.SUPPRESS,
                   help="the config the application serves (its "
                   "capture: and retrain_loop: blocks)")
    add_cluster_arguments(p)
    p.add_argument("--once", action="store_true", help="run the loop once now, whatever the "
                   "trigger")
    p.add_argument("--min-steps", type=int, default=RolloutParams.min_steps,
                   help="the rollout's (see `specserve speculator rollout --help`)")
    kube_speculator.add_arguments(p)
    args = p.parse_args(argv)
    cfg = load_config(args.config)  # ConfigError: exit 2 from cluster/cli.py, as every command
    if not cfg.capture.enabled:
        print("specserve speculator loop: capture.enabled: the loop retrains on captured "
              "traffic; turn capture on", file=sys.stderr)
        return 2
    if cfg.retrain_loop.trigger == "manual" and not args.once:
        print("specserve speculator loop: retrain_loop.trigger is manual: run with --once, or "
              "set it to drift or schedule", file=sys.stderr)
        return 2
    try:
        applier = kube_speculator.applier_from_args(args)
        connect(args.address)
        outcome = run_loop(cfg, args.app, args.once, RolloutParams(min_steps=args.min_steps),
                           lambda e: print(json.dumps(e), flush=True), applier=applier)
    except RolloutError as e:
        print(f"specserve speculator loop: {e}", file=sys.stderr)
        return 2
    return 0 if outcome == "forward" else 1
