"""`python -m bench.ab`: one pool setting at two or more values, side by side, on the routed
application `make serve` runs.

    python -m bench.ab --setting NAME --values V1 V2 [...] [--concurrency 1 2 4 8 16]
                       [--repeats 3] [--out DIR]

`NAME` is `router.<field>` (a `RouterConfig` field: `router.max_speculative_temperature`), a
`PoolConfig` field (`shm_busy_loop_s`: bench.busy_loop) or else a vLLM engine argument
put in both pools' `engine_kwargs` (`stream_interval`: how many output tokens vLLM's frontend
gathers before it hands a streamed chunk on; fewer chunks cost the serving frontend less CPU, the
client sees tokens in bursts). Values are parsed as JSON (`1`, `0.002`, `true`), else kept as text.

For each value: the default config with both pools' setting at it, one replica per pool
(bench.run's "routed 1+1"), and on that one application the cells of bench.run's routed system
(bench/cells.py: code at concurrency 1, the labeled mix over `--concurrency`, no Poisson or
held-out cells) for "routed" (`route: auto`), "forced-vanilla" and "forced-speculative", and the
machine cell (16 streams on the vanilla pool vs alternating on both pools). Every round runs each
value once, the order alternating round by round so drift hits them alike. Load comes from vLLM's
benchmark client (bench/serve_client.py). Printed and written to `DIR/report.md` and
`DIR/results.json`: per cell and value, output tok/s median [min-max] over the rounds; per level,
routed / the better forced route per round; the machine cell's both-pools / one-pool; where the
routed system sent each task and the router's reasons, round by round (two values that route
alike differ only by noise); the cores each part of the stack kept busy.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

from bench.report import (mix_by_task, predicted_vs_realized, route_reasons,
                          step_samples_by_bucket, step_times_vs_realized,
                          tokens_vs_realized)
from bench.run import (App, add_serving_arguments, base_config, local_serve, machine_info, run_app,
                       speculator_config)
from core import PoolConfig, SpecserveConfig, resolve_path

SYSTEMS = {"routed": "auto", "forced-vanilla": "vanilla", "forced-speculative": "speculative"}


def parse_value(text: str):
    """A `--values` item: JSON where it parses (`1`, `0.002`, `true`, `null`), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def with_setting(base: SpecserveConfig, name: str, value, eager: bool) -> SpecserveConfig:
    """Routed 1+1 (the config's speculator, autoscaling off) with `name` = `value`: the router's
    field for `router.<field>`, else on both pools the `PoolConfig` field of that name, else
    `engine_kwargs[name]`. Raises pydantic's ValidationError for a value the field refuses (an
    unknown router field included)."""
    cfg = speculator_config(base, base.speculative.speculator.method, (1, 1), eager)
    data = cfg.model_dump(mode="json")
    if name.startswith("router."):
        data["router"][name.removeprefix("router.")] = value
        return SpecserveConfig.from_dict(data)
    for pool in ("vanilla", "speculative"):
        if name in PoolConfig.model_fields:
            data[pool][name] = value
        else:
            data[pool]["engine_kwargs"] = {**data[pool].get("engine_kwargs", {}), name: value}
    return SpecserveConfig.from_dict(data)


def spread(values: list[float]) -> str:
    """`median [min-max]` of `values` (2 decimal places below 10, none from 10 up)."""
    if not values:
        return "-"
    digits = 0 if max(values) >= 10 else 2
    return (f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-"
            f"{max(values):.{digits}f}]")


def _labels(results: dict) -> tuple[str, list[str], list[str]]:
    """(setting, keys into each round, column labels) of a run; a bench.busy_loop run written
    before bench.ab (results["windows"]) reads as `shm_busy_loop_s`."""
    if "windows" in results:
        return ("shm_busy_loop_s", [str(w) for w in results["windows"]],
                [f"{w:g} s" for w in results["windows"]])
    values = [json.dumps(v) for v in results["values"]]
    return results["setting"], values, values


def route_summary(cell: dict) -> tuple[str, str]:
    """(each task's speculative/vanilla requests, the router's route/reason counts) of one routed
    system's cell, as bench.run's report writes them (bench/report.py); "-" for what a cell
    lacks (runs before the route counts were kept)."""
    return mix_by_task([cell]) or "-", route_reasons(cell)


def report(results: dict) -> str:
    """Markdown: tok/s per cell and value, routed / better forced route, machine both / one."""
    rounds = results["rounds"]
    setting, values, labels = _labels(results)
    lines = [f"# {setting}: {' vs '.join(labels)}", "",
             f"`{results['command']}`; {len(rounds)} rounds, vLLM's client, "
             f"{results['engines']} engines; machine: {json.dumps(results['machine'])}", "",
             "Output tok/s, median [min-max] over the rounds:", "",
             "| cell | system | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(values)]
    keys = list(rounds[0][values[0]].keys())
    for key in keys:
        for system in rounds[0][values[0]][key]:
            vals = [spread([r[v][key][system]["output_tok_s"] for r in rounds]) for v in values]
            lines.append(f"| {key} | {system} | " + " | ".join(vals) + " |")
    lines += ["", "Routed / the better forced route, and machine both-pools / one-pool, per round:",
              "", "| cell | " + " | ".join(labels) + " |", "|---|" + "---|" * len(values)]
    for key in keys:
        row = []
        for v in values:
            ratios = []
            for r in rounds:
                cell = r[v][key]
                if "routed" in cell:
                    best = max(cell["forced-vanilla"]["output_tok_s"],
                               cell["forced-speculative"]["output_tok_s"])
                    ratios.append(cell["routed"]["output_tok_s"] / best)
                else:
                    ratios.append(cell["both-pools"]["output_tok_s"]
                                  / cell["one-pool"]["output_tok_s"])
            row.append(spread(ratios) + " (" + ", ".join(f"{x:.2f}" for x in ratios) + ")")
        lines.append(f"| {key} | " + " | ".join(row) + " |")
    lines += ["", "Where the routed system sent each task, per round (speculative/vanilla requests), "
              "and why:", "", f"| cell | {setting} | round | routes by task | reasons |",
              "|---|---|---|---|---|"]
    for key in keys:
        if "routed" not in rounds[0][values[0]][key]:
            continue
        for v, label in zip(values, labels):
            for i, r in enumerate(rounds, 1):
                by_task, reasons = route_summary(r[v][key]["routed"])
                lines.append(f"| {key} | {label} | {i} | {by_task} | {reasons} |")
    lines += _predictions(results, values, labels, setting)
    lines += ["", "Cores kept busy (median over rounds) per part of the stack:", "",
              f"| cell | system | {setting} | cores |", "|---|---|---|---|"]
    for key in keys:
        for system in rounds[0][values[0]][key]:
            for v, label in zip(values, labels):
                cpus = [r[v][key][system]["cpu"] for r in rounds]
                parts = {p: statistics.median(c.get(p, 0) for c in cpus) for p in cpus[0]}
                lines.append(f"| {key} | {system} | {label} | "
                             + ", ".join(f"{p} {x:.2f}" for p, x in parts.items()) + " |")
    return "\n".join(lines) + "\n"


def _predictions(results: dict, values: list[str], labels: list[str], setting: str
                 ) -> list[str]:
    """Per value, bench.run's tables of the router's predicted S and the step times behind it
    against the forced pools (bench/report.py), over this run's rounds; "after the sweep" is the
    router's model when round 1's application finished its cells. Empty for runs before
    2026-12-07 (no curves kept)."""
    if "speedup_curves" not in results:
        return []
    rounds = results["rounds"]
    lines = []
    for v, label in zip(values, labels):
        cells = {key: {system: [r[v][key][system] for r in rounds]
                       for system in rounds[0][v][key]} for key in rounds[0][v]}
        sweep = [(int(key.split("@c")[1]), key) for key in cells if key.startswith("mixed@c")]
        after = {"speedup_curves": results["speedup_curves"][0].get(v) or {}}
        lines += ["", f"## The router's predictions with {setting} = {label}"]
        lines += predicted_vs_realized(after, cells, sweep)
        lines += step_times_vs_realized(after, cells, sweep)
        lines += tokens_vs_realized(cells, sweep)
        lines += step_samples_by_bucket(cells, sweep)
    return lines


def main(argv: list[str] | None = None, prog: str = "bench.ab",
         setting: str | None = None, values: list | None = None) -> int:
    """CLI entry point (module docstring); writes DIR/results.json after every app, then
    DIR/report.md; exit status 0, or 2 (argparse) on bad flags or a value the setting refuses.
    `setting`/`values` fix the setting and default values (bench.busy_loop)."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if setting is None:
        p.add_argument("--setting", required=True,
                       help="router.<RouterConfig field>, a PoolConfig field, else a vLLM "
                       "engine argument (engine_kwargs)")
        p.add_argument("--values", nargs="+", required=True, type=parse_value,
                       help="two or more values to compare (JSON, else text)")
    else:
        p.add_argument("--windows", dest="values", type=float, nargs="+", default=values,
                       help="busy-poll windows (seconds) to compare")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--requests-per-slot", type=int, default=2)
    p.add_argument("--min-requests", type=int, default=8)
    p.add_argument("--code-requests", type=int, default=8)
    p.add_argument("--machine-concurrency", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="rounds (each value once per round)")
    p.add_argument("--out", type=Path, default=None)
    add_serving_arguments(p, warmup=8, ttft_slo_ms=1000.0,
                          warmup_help="warm-up requests per system")
    args = p.parse_args(argv)
    args.setting = setting or args.setting
    if len(set(map(json.dumps, args.values))) != len(args.values):
        p.error("--values: give distinct values")
    args.workload, args.heldout_concurrency, args.poisson_requests = "mixed", [], 0
    base = base_config(args)
    from deployments.engine_args import check_engine_kwargs

    configs = {}
    for v in args.values:
        try:  # pydantic's ValidationError and ConfigError are ValueErrors
            configs[json.dumps(v)] = with_setting(base, args.setting, v, args.eager)
            check_engine_kwargs(configs[json.dumps(v)].vanilla)
        except ValueError as e:
            p.error(f"{args.setting}={json.dumps(v)}: {e}")
    out = args.out or Path("bench/results") / time.strftime(
        f"%Y%m%d-%H%M%S-{args.setting}", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    from vllm.tokenizers import get_tokenizer

    logging.getLogger("httpx").setLevel(logging.WARNING)
    tokenizer = get_tokenizer(resolve_path(base.model.path))
    results = {"command": " ".join([f"python -m {prog}", *(argv or sys.argv[1:])]),
               "machine": machine_info(), "setting": args.setting, "values": args.values,
               "rounds": [], "engines": "eager" if args.eager else "compiled"}
    keys = list(configs)
    with local_serve(args.port):
        for r in range(args.repeats):
            results["rounds"].append({})
            for key in (keys if r % 2 == 0 else keys[::-1]):
                print(f"round {r + 1} of {args.repeats}: {args.setting} = {key}", flush=True)
                app = App(f"routed-1+1-{args.setting}-{key}", configs[key], SYSTEMS)
                cells, extra, _ = run_app(app, args, [], tokenizer, machine=True, seed=r,
                                          curves=True)
                results["rounds"][-1][key] = cells
                results.setdefault("speedup_curves", [{} for _ in range(args.repeats)])
                results["speedup_curves"][r][key] = extra["speedup_curves"]
                (out / "results.json").write_text(json.dumps(results, indent=1))
    text = report(results)
    (out / "report.md").write_text(text)
    print(text)
    print(f"results: {out}/report.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
