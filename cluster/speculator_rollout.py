"""`specserve speculator rollout`: the command line of deployments/rollout.py (a candidate
speculator as a canary, then forward or back), straight to Serve or, with `--rayservice`, through a
RayService on KubeRay (cluster/kube/speculator.py)."""

from __future__ import annotations

import argparse
import json
import sys

from cluster.kube import speculator as kube_speculator
from core import load_config
from core.rollout import RolloutParams
from deployments import rollout
from deployments.rollout import (RolloutError, add_cluster_arguments, check_candidate, connect,
                                 run_rollout)


def main(argv: list[str] | None = None) -> int:
    """`specserve speculator rollout`; exit 0 rolled forward, 1 rolled back, 2 bad input."""
    p = argparse.ArgumentParser(prog="specserve speculator rollout",
                                description=rollout.__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", required=True, default=argparse.SUPPRESS,
                   help="the config the application serves")
    p.add_argument("--candidate", required=True, default=argparse.SUPPRESS, help="candidate checkpoint folder, e.g. the "
                   "eagle3-v1 that `specserve speculator retrain` wrote")
    add_cluster_arguments(p)
    p.add_argument("--decide", choices=["auto", "forward", "back"], default="auto",
                   help="auto: on live acceptance; forward/back: once the canary serves")
    p.add_argument("--min-steps", type=int, default=RolloutParams.min_steps,
                   help="verification steps a task needs on both speculators to be compared")
    p.add_argument("--max-regression", type=float, default=RolloutParams.max_regression,
                   help="back when any compared task's candidate mean acceptance length is "
                   "below (1 - this) x the incumbent's")
    p.add_argument("--min-ratio", type=float, default=RolloutParams.min_ratio,
                   help="forward needs the step-weighted candidate / incumbent ratio >= this")
    p.add_argument("--canary-timeout-s", type=float, default=900.0, help="longest wait for the "
                   "canary (and later every replica) to serve; else back")
    p.add_argument("--watch-timeout-s", type=float, default=600.0, help="longest wait for "
                   "enough live acceptance to decide; else back")
    kube_speculator.add_arguments(p)
    args = p.parse_args(argv)
    cfg = load_config(args.config)  # ConfigError: exit 2 from cluster/cli.py, as every command
    try:
        check_candidate(cfg, args.candidate)
        applier = kube_speculator.applier_from_args(args)
        connect(args.address)
        result = run_rollout(cfg, args.app, args.candidate,
                             RolloutParams(args.min_steps, args.max_regression, args.min_ratio),
                             args.decide, args.canary_timeout_s, args.watch_timeout_s,
                             lambda e: print(json.dumps(e), flush=True), applier=applier)
    except RolloutError as e:
        print(f"specserve speculator rollout: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"outcome": result.outcome, "reason": result.reason,
                      "incumbent": result.incumbent, "candidate": result.candidate,
                      "seconds": result.seconds}), flush=True)
    return 0 if result.outcome == "forward" else 1
