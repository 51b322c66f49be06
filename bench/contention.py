"""`python -m bench.contention`: how much the two pools slow each other on one machine's cores.

    python -m bench.contention [--config FILE] [--duration 12] [--port 8000] [--json FILE]

Each CPU replica owns its cores (deployments/cores.py), as a GPU replica owns its GPUs, so the two
pools' engines should not slow each other; what is left is what they still share: memory
bandwidth, caches, and the frontend processes (Serve's proxy, the router, each replica's own
process: tokenising, detokenising, streaming), which run on the same cores as the engines. This
measures it: it starts the application (config as given, one replica per pool), and for each cell
(B_v vanilla streams, B_s speculative streams, each a closed loop of greedy code requests, forced
with the `route` field) records each pool's output tokens/s and TPOT. Each joint cell is printed
beside what the alone cells predict: the joint-batch model (each pool's share of its own alone
rate at B_v + B_s streams: what one engine taking turns would give) and the fitted slowdown k,
the factor by which running both pools at once divides the sum of their alone rates at B_v and
B_s (1.0: no interference; measured 2.0-2.6 on 2 cores with both engines bound to core 0, i.e.
vLLM's automatic binding without core leases). `--from FILE` re-prints the table of a saved run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench.client import Sample, stream_request
from bench.machine import busy_cores, cpu_seconds
from core import DEFAULT_CONFIG_PATH, SpecserveConfig

PROMPT = "def binary_search(items, target):\n    "
MAX_TOKENS = 64
ALONE = {"vanilla": (1, 2, 4, 5, 8, 9), "speculative": (1, 2, 4, 5, 8, 9)}
JOINT = ((1, 1), (4, 1), (8, 1), (1, 4), (4, 4))  # (vanilla streams, speculative streams)


async def run_cell(client: httpx.AsyncClient, model: str, streams: dict[str, int],
                   duration_s: float) -> dict[str, dict]:
    """Closed loops of `streams[pool]` concurrent requests per pool for `duration_s` seconds.

    Returns {pool: {"tok_s": output tokens/s, "tpot_ms": median TPOT, "requests": n}} for each
    pool with streams > 0, and under "cpu" the cores each part of the stack kept busy on average
    (`process_class`: CPU seconds / wall seconds; the machine has `os.cpu_count()`). (Serve's
    stream relays several engine outputs per chunk, so chunk gaps do not time engine steps.)
    """
    samples: dict[str, list[Sample]] = {pool: [] for pool, n in streams.items() if n}
    body = {"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True}
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    stop = t0 + duration_s

    async def loop(pool: str) -> None:
        while time.perf_counter() < stop:
            s = await stream_request(client, "/v1/completions", {**body, "route": pool}, "code")
            if not s.ok or s.route != pool:
                raise RuntimeError(f"{pool}: {s.error or f'served by {s.route} ({s.reason})'}")
            samples[pool].append(s)

    await asyncio.gather(*(loop(pool) for pool, n in streams.items() for _ in range(n)))
    wall = time.perf_counter() - t0
    cpu1 = cpu_seconds()
    out: dict[str, dict] = {
        pool: {"tok_s": round(sum(s.completion_tokens for s in got) / wall, 1),
               "tpot_ms": round(1000 * statistics.median(s.tpot_s for s in got), 2),
               "requests": len(got)} for pool, got in samples.items()}
    out["cpu"] = busy_cores(cpu0, cpu1, wall)
    return out


async def measure(url: str, model: str, duration_s: float) -> dict:
    """Every alone and joint cell, after a warm-up; returns {"alone": ..., "joint": ...}."""
    out: dict = {"alone": {"vanilla": {}, "speculative": {}}, "joint": []}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await run_cell(client, model, {"vanilla": 2, "speculative": 2}, 4.0)  # warm-up
        for pool, batches in ALONE.items():
            for b in batches:
                got = await run_cell(client, model, {pool: b}, duration_s)
                cell = {**got[pool], "cpu": got["cpu"]}
                out["alone"][pool][b] = cell
                print(f"{pool} alone at {b}: {cell}", flush=True)
        for b_v, b_s in JOINT:
            cell = await run_cell(client, model, {"vanilla": b_v, "speculative": b_s}, duration_s)
            out["joint"].append({"vanilla_streams": b_v, "speculative_streams": b_s, **cell})
            print(f"joint {b_v}+{b_s}: {cell}", flush=True)
    return out


def predictions(result: dict) -> list[dict]:
    """Per joint cell (output tokens/s): measured per pool and in total; the joint-batch model's
    total, Σ_x B_x · alone_x(B_v + B_s) / (B_v + B_s); and the fitted slowdown
    k = (alone_v(B_v) + alone_s(B_s)) / measured total (None where an alone cell is missing)."""
    alone = {pool: {int(b): c["tok_s"] for b, c in cells.items()}
             for pool, cells in result["alone"].items()}
    rows = []
    for cell in result["joint"]:
        b_v, b_s = cell["vanilla_streams"], cell["speculative_streams"]
        both = b_v + b_s
        measured = cell["vanilla"]["tok_s"] + cell["speculative"]["tok_s"]
        v_joint, s_joint = alone["vanilla"].get(both), alone["speculative"].get(both)
        v_own, s_own = alone["vanilla"].get(b_v), alone["speculative"].get(b_s)
        rows.append({
            "cell": f"{b_v}+{b_s}", "vanilla_tok_s": cell["vanilla"]["tok_s"],
            "speculative_tok_s": cell["speculative"]["tok_s"], "total_tok_s": round(measured, 1),
            "joint_batch_model_tok_s": None if v_joint is None or s_joint is None else
            round((b_v * v_joint + b_s * s_joint) / both, 1),
            "slowdown": None if v_own is None or s_own is None else
            round((v_own + s_own) / measured, 2)})
    return rows


def print_table(result: dict) -> None:
    print("| B_v+B_s | vanilla tok/s | speculative tok/s | total | joint-batch model | "
          "slowdown k |")
    print("|---|---|---|---|---|---|")
    for r in predictions(result):
        print(f"| {r['cell']} | {r['vanilla_tok_s']} | {r['speculative_tok_s']} | "
              f"{r['total_tok_s']} | {r['joint_batch_model_tok_s']} | {r['slowdown']} |")
    cells = [(f"vanilla {b}", c) for b, c in result["alone"]["vanilla"].items()]
    cells += [(f"speculative {b}", c) for b, c in result["alone"]["speculative"].items()]
    cells += [(f"joint {c['vanilla_streams']}+{c['speculative_streams']}", c)
              for c in result["joint"]]
    kinds = sorted({k for _, c in cells for k in c.get("cpu", {})})
    if kinds:
        print("\nCores kept busy per part of the stack (CPU s / wall s):\n")
        print("| cell | " + " | ".join(kinds) + " |")
        print("|---|" + "---|" * len(kinds))
        for name, c in cells:
            print(f"| {name} | " + " | ".join(str(c.get("cpu", {}).get(k, "-")) for k in kinds)
                  + " |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="config (default cluster/default.yaml)")
    p.add_argument("--duration", type=float, default=12.0, help="seconds per cell")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--from", dest="saved", type=Path, help="print the table of a saved run")
    args = p.parse_args(argv)
    if args.saved:
        print_table(json.loads(args.saved.read_text()))
        return 0
    cfg = SpecserveConfig.from_yaml(args.config or DEFAULT_CONFIG_PATH)
    data = cfg.model_dump(mode="json")
    if "autoscaling" in data:  # one replica per pool: the cells must not change the engines
        data["autoscaling"]["enabled"] = False
    cfg = SpecserveConfig.from_dict(data)
    from ray import serve

    from bench.run import local_serve
    from deployments.app import build_app_from_config

    with local_serve(args.port):
        serve.run(build_app_from_config(cfg), name="specserve", route_prefix="/")
        result = asyncio.run(measure(f"http://127.0.0.1:{args.port}",
                                     cfg.model.served_model_name, args.duration))
    result["predictions"] = predictions(result)
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
