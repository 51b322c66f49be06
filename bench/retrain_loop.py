"""`python -m bench.retrain_loop`: capture -> retrain -> serve the retrained head, on one app.

Issue 32's benchmark on the model lab's EAGLE-3 head (cluster/examples/eagle3.yaml, compiled
engines; one speculative replica, the vanilla pool at 0, capture on) with vLLM's client
(bench/serve_client.py), every request forced down the speculative path:

1. **before**: `--repeats` rounds, each a c1 cell of `--measure-requests` shifted prompts (JSON
   records, bench/shifted.py, seed 1) and one of as many of the lab's code-completion prompts
   (bench/prompts/tasks.jsonl); output tok/s and mean acceptance length (vLLM's counters).
2. The rows those cells left in the capture store are deleted; then **capture**:
   `--capture-requests` other shifted prompts (seed 2) at `--capture-concurrency`; the replicas'
   p99 of the time capture added to a request (`specserve_capture_added_p99_seconds`) and the rows
   written / dropped.
3. **retrain**: `specserve speculator retrain` on the store (a subprocess, as `ray job submit`
   would run it), gated by vLLM's acceptance (models/retrain.py).
4. **after**: the candidate rolled out as users roll it out (`specserve speculator rollout`'s
   `run_rollout`: canary, then forward, forced: the benchmark sends no traffic to watch), then the
   cells of step 1 again, same prompts.
5. **again**: the lab head rolled out the same way (its replica restarted as the candidate's was),
   then the cells once more: after / again is the head's effect with the restart on both sides,
   again / before what a replica restart alone does.

The application is deployed declaratively (deployments.deploy.run_app, as `specserve serve` does).
Prints and writes `DIR/results.json` and `DIR/report.md`: each figure's median and min-max over the
rounds and the ratios (median, and the range from the worst to the best pairing).

    python -m bench.retrain_loop [--repeats 3] [--measure-requests 12] [--capture-requests 400]
        [--capture-concurrency 32] [--max-tokens 64] [--steps 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from bench.run import local_serve, wait_ready
from bench.serve_client import Load, run_cell, sample_requests
from bench.shifted import json_records_prompts
from bench.summary import Slo
from bench.workload import Job, load_prompts
from core import SpecserveConfig, resolve_path

CONFIG = Path(__file__).resolve().parent.parent / "cluster" / "examples" / "eagle3.yaml"
PHASES = ("before", "after", "again")
RATIOS = (("after", "before"), ("after", "again"), ("again", "before"))
APP = "specserve"


def app_config(base: Path, capture_uri: str, port: int, speculator_model: str | None = None
               ) -> dict:
    """The benchmark's config as a dict: `base` with one speculative replica, no vanilla replica,
    fixed replicas, capture on to `capture_uri` (flushed every 2 s)."""
    data = yaml.safe_load(base.read_text())
    data["vanilla"]["num_replicas"] = 0
    data["speculative"]["num_replicas"] = 1
    if speculator_model:
        data["speculative"]["speculator"]["model"] = speculator_model
    data["autoscaling"] = {"enabled": False}
    data.setdefault("server", {})["port"] = port
    data["capture"] = {"enabled": True, "uri": capture_uri, "flush_interval_s": 2.0}
    return data


def shifted_jobs(model: str, n: int, seed: int, max_tokens: int) -> list[Job]:
    """`n` shifted (JSON-records) completion jobs, greedy, forced speculative."""
    return [Job("/v1/completions", {"model": model, "prompt": p, "max_tokens": max_tokens,
                                    "temperature": 0.0, "route": "speculative"}, "extraction")
            for p in json_records_prompts(n, seed=seed)]


def lab_code_jobs(model: str, n: int, max_tokens: int) -> list[Job]:
    """The first `n` code-completion prompts of the lab's labeled set, greedy, forced
    speculative."""
    rows = [r for r in load_prompts() if r["task"] == "code" and r["kind"] == "completion"][:n]
    return [Job("/v1/completions", {"model": model, "prompt": r["prompt"],
                                    "max_tokens": max_tokens, "temperature": 0.0,
                                    "route": "speculative"}, "code") for r in rows]


async def measure(url: str, model: str, workloads: dict[str, list[Job]], tokenizer) -> dict:
    """One c1 cell per workload: {workload: {output_tok_s, mean_acceptance_length, errors}}."""
    out = {}
    for name, jobs in workloads.items():
        cell = await run_cell(url, model, sample_requests(jobs, tokenizer), Load(concurrency=1),
                              Slo(ttft_s=10.0, tpot_s=1.0), tokenizer)
        out[name] = {"output_tok_s": cell["output_tok_s"], "errors": cell["errors"],
                     "mean_acceptance_length": (cell["acceptance"] or {}).get(
                         "mean_acceptance_length")}
        print(f"  {name}: {out[name]}", flush=True)
    return out


def measure_rounds(url: str, model: str, workloads: dict[str, list[Job]], tokenizer,
                   repeats: int) -> list[dict]:
    """One warm-up round (discarded), then `repeats` rounds of `measure`."""
    asyncio.run(measure(url, model, workloads, tokenizer))
    return [asyncio.run(measure(url, model, workloads, tokenizer)) for _ in range(repeats)]


def roll_out(cfg: SpecserveConfig, head: str, url: str) -> dict:
    """`head` onto the speculative pool through `run_rollout` (canary, then forward, forced);
    returns its seconds per step once /health is ok again.

    Raises:
        RuntimeError: the rollout did not end forward with every replica on `head`.
    """
    from core.rollout import RolloutParams
    from deployments.rollout import run_rollout

    events: list[dict] = []
    result = run_rollout(cfg, APP, head, RolloutParams(), decision="forward",
                         log=lambda e: (events.append(e), print(json.dumps(e), flush=True)))
    if result.outcome != "forward" or not events[-1].get("replicas_updated"):
        raise RuntimeError(f"rollout of {head}: {result.outcome} ({result.reason})")
    wait_ready(url)
    return {k: round(v, 1) for k, v in result.seconds.items()}


def capture_metrics(url: str) -> dict:
    """`specserve_capture_*` of the speculative pool from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    out: dict = {"rows": {}}
    for f in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for s in f.samples:
            if s.labels.get("pool") != "speculative":
                continue
            if f.name == "specserve_capture_rows":
                out["rows"][s.labels["outcome"]] = int(s.value)
            elif f.name == "specserve_capture_added_p99_seconds":
                out["added_p99_ms"] = round(1000 * s.value, 4)
    return out


def _spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def summarize(rounds: dict[str, list[dict]]) -> dict:
    """Per workload and figure: each phase's spread and the ratios of `RATIOS` present (median
    over median; range from min(x) / max(y) to max(x) / min(y))."""
    out: dict = {}
    for workload in rounds["before"][0]:
        for figure in ("output_tok_s", "mean_acceptance_length"):
            values = {phase: [r[workload][figure] for r in rounds[phase] if r[workload][figure]]
                      for phase in PHASES if phase in rounds}
            row = {phase: _spread(v) for phase, v in values.items() if v}
            for x, y in RATIOS:
                if x in row and y in row:
                    row[f"{x}/{y}"] = {
                        "ratio": round(row[x]["median"] / row[y]["median"], 3),
                        "range": [round(min(values[x]) / max(values[y]), 3),
                                  round(max(values[x]) / min(values[y]), 3)]}
            if row:
                out.setdefault(workload, {})[figure] = row
    return out


def markdown(results: dict) -> str:
    """The report: targets, then every figure."""
    s, cap = results["summary"], results["capture"]
    phases = [p for p in PHASES if p in results["rounds"]]
    ratios = [f"{x}/{y}" for x, y in RATIOS if x in phases and y in phases]
    lines = ["# Capture -> retrain -> roll out on one app (bench/retrain_loop.py)", "",
             f"Config: {results['config']}; {results['args']}", "",
             "| workload | figure | " + " | ".join(f"{p} median (min-max)" for p in phases)
             + " | " + " | ".join(f"{r} (range)" for r in ratios) + " |",
             "|---|---|" + "---|" * (len(phases) + len(ratios))]
    for workload, figures in s.items():
        for figure, f in figures.items():
            cells = [f"{f[p]['median']} ({f[p]['min']}-{f[p]['max']})" if p in f else "-"
                     for p in phases]
            cells += [f"{f[r]['ratio']} ({f[r]['range'][0]}-{f[r]['range'][1]})" if r in f
                      else "-" for r in ratios]
            lines.append(f"| {workload} | {figure} | " + " | ".join(cells) + " |")
    gate = results["retrain"].get("gate", {})
    lines += ["", f"Capture at c{results['args']['capture_concurrency']}: rows {cap['rows']}, "
              f"p99 added {cap.get('added_p99_ms')} ms per request.",
              f"Retrain: {results['retrain'].get('windows')}, gate {gate}, "
              f"wall {results['retrain'].get('wall_s')} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--measure-requests", type=int, default=12)
    p.add_argument("--capture-requests", type=int, default=400)
    p.add_argument("--capture-concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("bench/results") / time.strftime(
        "%Y-%m-%d-retrain-loop"))
    args = p.parse_args(argv)
    from ray import serve
    from transformers import AutoTokenizer

    from deployments.deploy import run_app

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    capture_uri = str(out / "capture")
    cfg = SpecserveConfig.from_dict(app_config(args.config, capture_uri, args.port))
    model = cfg.model.served_model_name
    tokenizer = AutoTokenizer.from_pretrained(resolve_path(cfg.model.path))
    workloads = {"shifted": shifted_jobs(model, args.measure_requests, 1, args.max_tokens),
                 "lab_code": lab_code_jobs(model, args.measure_requests, args.max_tokens)}
    url = f"http://127.0.0.1:{args.port}"
    results: dict = {"config": str(args.config), "args": {k: str(v) if isinstance(v, Path) else v
                                                          for k, v in vars(args).items()},
                     "rounds": {}}
    with local_serve(args.port):
        t0 = time.perf_counter()
        run_app(cfg, APP)
        wait_ready(url)
        results["start_s"] = round(time.perf_counter() - t0, 1)
        results["rounds"]["before"] = measure_rounds(url, model, workloads, tokenizer,
                                                     args.repeats)
        print(f"served the lab head after {results['start_s']} s", flush=True)
        time.sleep(5)  # the measurement's rows reach the store, then leave it
        for f in Path(capture_uri).glob("part-*.parquet"):
            f.unlink()
        jobs = shifted_jobs(model, args.capture_requests, 2, args.max_tokens)
        cell = asyncio.run(run_cell(url, model, sample_requests(jobs, tokenizer),
                                    Load(concurrency=args.capture_concurrency),
                                    Slo(ttft_s=10.0, tpot_s=1.0), tokenizer))
        time.sleep(8)  # flush + a stats push
        results["capture"] = {**capture_metrics(url), "errors": cell["errors"],
                              "output_tok_s": cell["output_tok_s"],
                              "tpot_p99_ms": cell.get("tpot_p99_ms")}
        print(f"capture: {results['capture']}", flush=True)
        config_file = out / "config.yaml"
        config_file.write_text(yaml.safe_dump(app_config(args.config, capture_uri, args.port)))
        report = out / "retrain.json"
        proc = subprocess.run([sys.executable, "-m", "cluster.cli", "speculator", "retrain",
                               "--config", str(config_file), "--out", str(out / "heads"),
                               "--steps", str(args.steps), "--report", str(report)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        results["retrain"] = json.loads(report.read_text()) if report.is_file() else {
            "error": proc.stderr[-2000:]}
        results["retrain"]["exit_status"] = proc.returncode
        print(f"retrain: exit {proc.returncode}, gate {results['retrain'].get('gate')}",
              flush=True)
        if proc.returncode != 0:
            (out / "results.json").write_text(json.dumps(results, indent=2))
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
        candidate = results["retrain"]["path"]
        results["rollout_s"] = {}
        for phase, head in (("after", candidate),
                            ("again", resolve_path(cfg.speculative.speculator.model))):
            results["rollout_s"][phase] = roll_out(cfg, head, url)
            print(f"serving {head} after {results['rollout_s'][phase]} s", flush=True)
            results["rounds"][phase] = measure_rounds(url, model, workloads, tokenizer,
                                                      args.repeats)
            (out / "results.json").write_text(json.dumps(results, indent=2))
        serve.delete(APP)
    results["summary"] = summarize(results["rounds"])
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "report.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
