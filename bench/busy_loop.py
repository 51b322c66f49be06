"""`python -m bench.busy_loop`: the engines' shared-memory busy-poll window, vLLM's 1 s against
specserve's CPU default, on the routed application `make serve` runs.

    python -m bench.busy_loop [--windows 1.0 0.002] [--concurrency 1 2 4 8 16] [--repeats 3]
                              [--out DIR]

Why: vLLM's engine processes busy-poll their shared-memory queues for 1 s after every message
(deployments/vllm_plugin, part 2), so after each request an idle engine keeps its core busy for
a second. On a CPU node the serving frontend runs on the engines' cores. `PoolConfig.
shm_busy_loop_s` sets the window; this benchmark picks its CPU default by measurement.

For each window in `--windows`: the default config with both pools' `shm_busy_loop_s` set to it,
one replica per pool (bench.run's "routed 1+1"), and on that one application the cells of
bench.run's routed system (bench/cells.py: code at concurrency 1, the labeled mix over
`--concurrency`, no Poisson or held-out cells) for "routed" (`route: auto`), "forced-vanilla" and
"forced-speculative", and the machine cell (16 streams on the vanilla pool vs alternating on
both pools). Every round runs each window once, the order alternating round by round so drift
hits both alike. Load comes from vLLM's benchmark client (bench/serve_client.py). Printed and
written to `DIR/report.md` and `DIR/results.json`: per cell and window, output tok/s median
[min-max] over the rounds; per level, routed / the better forced route per round; the machine
cell's both-pools / one-pool; the cores each part of the stack kept busy.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

from bench.run import (App, add_serving_arguments, base_config, local_serve, machine_info, run_app,
                       speculator_config)
from core import SpecserveConfig, resolve_path

SYSTEMS = {"routed": "auto", "forced-vanilla": "vanilla", "forced-speculative": "speculative"}


def with_window(base: SpecserveConfig, seconds: float, eager: bool) -> SpecserveConfig:
    """Routed 1+1 (ngram, autoscaling off) with both pools' `shm_busy_loop_s` = `seconds`."""
    cfg = speculator_config(base, base.speculative.speculator.method, (1, 1), eager)
    data = cfg.model_dump(mode="json")
    for pool in ("vanilla", "speculative"):
        data[pool]["shm_busy_loop_s"] = seconds
    return SpecserveConfig.from_dict(data)


def spread(values: list[float]) -> str:
    """`median [min-max]` of `values` (2 decimal places below 10, none from 10 up)."""
    if not values:
        return "-"
    digits = 0 if max(values) >= 10 else 2
    return (f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-"
            f"{max(values):.{digits}f}]")


def report(results: dict) -> str:
    """Markdown: tok/s per cell and window, routed / better forced route, machine both / one."""
    rounds, windows = results["rounds"], results["windows"]
    lines = [f"# Busy-poll window: {' vs '.join(f'{w:g} s' for w in windows)}", "",
             f"`{results['command']}`; {len(rounds)} rounds, vLLM's client, "
             f"{results['engines']} engines; machine: {json.dumps(results['machine'])}", "",
             "Output tok/s, median [min-max] over the rounds:", "",
             "| cell | system | " + " | ".join(f"{w:g} s" for w in windows) + " |",
             "|---|---|" + "---|" * len(windows)]
    keys = list(rounds[0][str(windows[0])].keys())
    for key in keys:
        for system in rounds[0][str(windows[0])][key]:
            vals = [spread([r[str(w)][key][system]["output_tok_s"] for r in rounds])
                    for w in windows]
            lines.append(f"| {key} | {system} | " + " | ".join(vals) + " |")
    lines += ["", "Routed / the better forced route, and machine both-pools / one-pool, per round:",
              "", "| cell | " + " | ".join(f"{w:g} s" for w in windows) + " |",
              "|---|" + "---|" * len(windows)]
    for key in keys:
        row = []
        for w in windows:
            ratios = []
            for r in rounds:
                cell = r[str(w)][key]
                if "routed" in cell:
                    best = max(cell["forced-vanilla"]["output_tok_s"],
                               cell["forced-speculative"]["output_tok_s"])
                    ratios.append(cell["routed"]["output_tok_s"] / best)
                else:
                    ratios.append(cell["both-pools"]["output_tok_s"]
                                  / cell["one-pool"]["output_tok_s"])
            row.append(spread(ratios) + " (" + ", ".join(f"{x:.2f}" for x in ratios) + ")")
        lines.append(f"| {key} | " + " | ".join(row) + " |")
    lines += ["", "Cores kept busy (median over rounds) per part of the stack:", "",
              "| cell | system | window | cores |", "|---|---|---|---|"]
    for key in keys:
        for system in rounds[0][str(windows[0])][key]:
            for w in windows:
                cpus = [r[str(w)][key][system]["cpu"] for r in rounds]
                parts = {p: statistics.median(c.get(p, 0) for c in cpus) for p in cpus[0]}
                lines.append(f"| {key} | {system} | {w:g} s | "
                             + ", ".join(f"{p} {v:.2f}" for p, v in parts.items()) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (module docstring); writes DIR/results.json after every app, then
    DIR/report.md; exit status 0, or 2 (argparse) on bad flags."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--windows", type=float, nargs="+", default=[1.0, 0.002],
                   help="busy-poll windows (seconds) to compare")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--requests-per-slot", type=int, default=2)
    p.add_argument("--min-requests", type=int, default=8)
    p.add_argument("--code-requests", type=int, default=8)
    p.add_argument("--machine-concurrency", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="rounds (each window once per round)")
    p.add_argument("--out", type=Path, default=None)
    add_serving_arguments(p, warmup=8, ttft_slo_ms=1000.0,
                          warmup_help="warm-up requests per system")
    args = p.parse_args(argv)
    if any(w < 0 for w in args.windows):
        p.error("--windows: seconds must be >= 0")
    args.workload, args.heldout_concurrency = "mixed", []
    out = args.out or Path("bench/results") / time.strftime("%Y%m%d-%H%M%S-busy-loop",
                                                            time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    from vllm.tokenizers import get_tokenizer

    logging.getLogger("httpx").setLevel(logging.WARNING)
    base = base_config(args)
    tokenizer = get_tokenizer(resolve_path(base.model.path))
    results = {"command": " ".join(["python -m bench.busy_loop", *(argv or sys.argv[1:])]),
               "machine": machine_info(), "windows": args.windows, "rounds": [],
               "engines": "eager" if args.eager else "compiled"}
    with local_serve(args.port):
        for r in range(args.repeats):
            order = args.windows if r % 2 == 0 else args.windows[::-1]
            results["rounds"].append({})
            for w in order:
                print(f"round {r + 1} of {args.repeats}: busy-poll window {w:g} s", flush=True)
                app = App(f"routed-1+1-busy-{w:g}", with_window(base, w, args.eager), SYSTEMS)
                cells, _, _ = run_app(app, args, [], tokenizer, machine=True)
                results["rounds"][-1][str(w)] = cells
                (out / "results.json").write_text(json.dumps(results, indent=1))
    text = report(results)
    (out / "report.md").write_text(text)
    print(text)
    print(f"results: {out}/report.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
