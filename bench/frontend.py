"""`python -m bench.frontend`: the same application behind each of Ray Serve's HTTP frontends.

    python -m bench.frontend [--repeats 2] [--concurrency 16] [--requests 48] [--eager]

On a CPU box the frontend (Serve's HTTP ingress, the router replica, the pools' replica processes,
Ray) shares the cores with the engines, so what it costs is taken from the engines. This starts the
routed 1+1 application of `make serve` (compiled engines unless `--eager`, autoscaling off) once per
frontend, each in a fresh local Ray (Serve reads these flags at start):

- "proxy": Serve's Python proxy actor (`RAY_SERVE_ENABLE_HA_PROXY=0`,
  `RAY_SERVE_THROUGHPUT_OPTIMIZED=0`), what specserve ran before 2026-12-04;
- "haproxy": Ray Serve's high-throughput mode, specserve's default (`core.RAY_NODE_ENV`): HAProxy
  in place of the proxy actor, direct ingress, gRPC between replicas.

On each it sends, with vLLM's benchmark client (bench/serve_client.py), `--requests` mixed-workload
requests over `--concurrency` closed-loop slots to: the vanilla pool alone ("one-pool"),
alternating between both pools ("both-pools"), the speculative pool alone ("spec-only"), and
`route: auto` ("routed"), `--repeats` times; and prints output tok/s and the cores each part of the
stack kept busy (bench/machine.py). Writes `DIR/results.json` and `DIR/report.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

FRONTENDS = {"proxy": {"RAY_SERVE_ENABLE_HA_PROXY": "0", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "0"},
             "haproxy": {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
                         "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "1"}}
SYSTEMS = {"one-pool": ("vanilla",), "both-pools": ("vanilla", "speculative"),
           "spec-only": ("speculative",), "routed": ("auto",)}


def measure(args) -> list[dict]:
    """Starts the routed 1+1 app on a local Ray (the frontend the environment says) and measures
    every system `args.repeats` times; returns one row per (round, system)."""
    from ray import serve

    from bench.cells import alternating
    from bench.run import base_config, local_serve, speculator_config, wait_ready
    from bench.serve_client import Load, run_cell, sample_requests, warm_up
    from bench.summary import Slo
    from bench.workload import jobs
    from core import resolve_path
    from deployments.app import build_app_from_config
    from vllm.tokenizers import get_tokenizer

    base = base_config(argparse.Namespace(config=None, port=args.port))
    cfg = speculator_config(base, base.speculative.speculator.method, (1, 1), args.eager)
    tokenizer = get_tokenizer(resolve_path(base.model.path))
    model, url = cfg.model.served_model_name, f"http://127.0.0.1:{args.port}"
    rows: list[dict] = []
    with local_serve(args.port):
        t0 = time.perf_counter()
        serve.run(build_app_from_config(cfg), name="specserve", route_prefix="/")
        wait_ready(url)
        print(f"ready in {time.perf_counter() - t0:.0f} s", flush=True)

        async def run() -> None:
            for route in ("auto", "vanilla", "speculative"):
                await warm_up(url, model, list(itertools.islice(jobs("mixed", model, 99, route),
                                                                16)), 4)
            for r in range(args.repeats):
                for name, routes in SYSTEMS.items():
                    batch = list(itertools.islice(alternating("mixed", model, 70 + r, routes),
                                                  args.requests))
                    got = await run_cell(url, model, sample_requests(batch, tokenizer),
                                         Load(concurrency=args.concurrency), Slo(1.0, 0.05),
                                         tokenizer, [j.task for j in batch])
                    rows.append({"round": r, "system": name, "output_tok_s": got["output_tok_s"],
                                 "errors": got["errors"], "route_mix": got["route_mix"],
                                 "cpu": got["cpu"]})
                    print(json.dumps(rows[-1]), flush=True)

        try:
            asyncio.run(run())
        finally:
            serve.delete("specserve")
    return rows


def report(results: dict) -> str:
    """report.md: tok/s median [min-max] per frontend and system, the ratio haproxy / proxy, and
    the cores per part of the stack (median over rounds)."""
    from bench.report import fmt

    lines = ["# Serve frontends: the routed 1+1 app", "", f"Command: `{results['command']}`", "",
             "| system | " + " | ".join(f"{f} tok/s" for f in results["frontends"]) +
             " | haproxy / proxy |", "|---|" + "---|" * (len(results["frontends"]) + 1)]
    runs = results["frontends"]

    def values(frontend: str, system: str, key=lambda row: row["output_tok_s"]) -> list[float]:
        return [key(row) for row in runs.get(frontend, []) if row["system"] == system]

    for system in SYSTEMS:
        cells = [values(f, system) for f in runs]
        ratio = "-"
        if all(runs.get(f) for f in FRONTENDS):
            pairs = zip(values("haproxy", system), values("proxy", system))
            ratio = fmt([h / p for h, p in pairs if p], 2)
        lines.append(f"| {system} | " + " | ".join(fmt(c) for c in cells) + f" | {ratio} |")
    machine = {f: [b / o for b, o in zip(values(f, "both-pools"), values(f, "one-pool")) if o]
               for f in runs}
    lines += ["", "The machine, both pools busy / one pool busy (round by round; target 1.5): "
              + "; ".join(f"{f} {fmt(r, 2)}" for f, r in machine.items() if r)]
    lines += ["", "Cores busy per part (median over rounds):", "",
              "| frontend | system | engines | pool replicas | router | proxy | ray | client | "
              "machine |", "|---|---|---|---|---|---|---|---|---|"]
    for frontend in runs:
        for system in SYSTEMS:
            parts = ("engines", "pool replicas", "router", "proxy", "ray", "client", "machine")
            lines.append(f"| {frontend} | {system} | " + " | ".join(
                fmt(values(frontend, system, lambda row, p=p: row["cpu"].get(p, 0.0)), 2)
                for p in parts) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frontends", nargs="+", choices=list(FRONTENDS), default=list(FRONTENDS))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--eager", action="store_true")
    p.add_argument("--out", type=Path)
    p.add_argument("--one", choices=list(FRONTENDS), help=argparse.SUPPRESS)  # child process
    args = p.parse_args(argv)
    if args.one:  # the child: its environment already names the frontend
        print("ROWS " + json.dumps(measure(args)), flush=True)
        return 0
    out = args.out or Path("bench/results") / (time.strftime("%Y%m%d-%H%M%S", time.gmtime())
                                               + "-frontend")
    out.mkdir(parents=True, exist_ok=True)
    results = {"command": " ".join(["python -m bench.frontend", *(argv or sys.argv[1:])]),
               "frontends": {}}
    for frontend in args.frontends:  # one fresh Ray per frontend: Serve reads the flags at start
        cmd = [sys.executable, "-m", "bench.frontend", "--one", frontend, "--repeats",
               str(args.repeats), "--concurrency", str(args.concurrency), "--requests",
               str(args.requests), "--port", str(args.port)] + (["--eager"] if args.eager else [])
        proc = subprocess.run(cmd, env={**os.environ, **FRONTENDS[frontend]},
                              stdout=subprocess.PIPE, text=True)
        rows = [json.loads(t[5:]) for t in proc.stdout.splitlines() if t.startswith("ROWS ")]
        if proc.returncode or not rows:
            print(f"{frontend}: failed (exit {proc.returncode})", file=sys.stderr)
            continue
        results["frontends"][frontend] = rows[0]
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "report.md").write_text(report(results))
    print((out / "report.md").read_text() if (out / "report.md").exists() else "no results")
    print(f"results: {out}/report.md")
    return 0 if len(results["frontends"]) == len(args.frontends) else 1


if __name__ == "__main__":
    raise SystemExit(main())
