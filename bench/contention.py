"""`python -m bench.contention`: how much the two pools slow each other on one machine's cores.

    python -m bench.contention [--config FILE] [--duration 12] [--port 8000] [--json FILE]

On a CPU machine (and on a GPU shared by both pools) the vanilla and the speculative engines run
on the same cores. The router's shared-compute model (`router.pools_share_compute`,
`RouteEstimator.with_step_times`) predicts the step time a request meets on a pool as that pool's
step time *alone* at the joint batch of both pools, T_x(B_v + B_s). If instead the engines take
turns on the cores, each step of either waits for a step of the other and the time is nearer
T_v(B_v) + T_s(B_s); then one request sent to an idle pool slows every request of the busy one.
This measures which: it starts the application (config as given, one replica per pool), and for
each cell (B_v vanilla streams, B_s speculative streams, each a closed loop of greedy code
requests, forced with the `route` field) records each pool's decode step time as its requests
live it (median gap between streamed chunks: one chunk per engine step, vLLM's ITL) and output
tokens/s. Alone cells give T_v(B) and T_s(B); joint cells are printed beside both predictions.
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
from cluster.config import DEFAULT_CONFIG_PATH, SpecserveConfig

PROMPT = "def binary_search(items, target):\n    "
MAX_TOKENS = 64
ALONE = {"vanilla": (1, 2, 4, 5, 8, 9), "speculative": (1, 2, 4, 5, 8, 9)}
JOINT = ((1, 1), (4, 1), (8, 1), (1, 4), (4, 4))  # (vanilla streams, speculative streams)


async def run_cell(client: httpx.AsyncClient, model: str, streams: dict[str, int],
                   duration_s: float) -> dict[str, dict]:
    """Closed loops of `streams[pool]` concurrent requests per pool for `duration_s` seconds.

    Returns {pool: {"step_ms": median chunk gap, "tok_s": output tokens/s, "requests": n}} for
    each pool with streams > 0.
    """
    samples: dict[str, list[Sample]] = {pool: [] for pool, n in streams.items() if n}
    body = {"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True}
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
    return {pool: {"step_ms": round(1000 * statistics.median(g for s in got for g in s.itl_s), 2),
                   "tok_s": round(sum(s.completion_tokens for s in got) / wall, 1),
                   "requests": len(got)}
            for pool, got in samples.items()}


async def measure(url: str, model: str, duration_s: float) -> dict:
    """Every alone and joint cell, after a warm-up; returns {"alone": ..., "joint": ...}."""
    out: dict = {"alone": {"vanilla": {}, "speculative": {}}, "joint": []}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await run_cell(client, model, {"vanilla": 2, "speculative": 2}, 4.0)  # warm-up
        for pool, batches in ALONE.items():
            for b in batches:
                cell = (await run_cell(client, model, {pool: b}, duration_s))[pool]
                out["alone"][pool][b] = cell
                print(f"{pool} alone at {b}: {cell}", flush=True)
        for b_v, b_s in JOINT:
            cell = await run_cell(client, model, {"vanilla": b_v, "speculative": b_s}, duration_s)
            out["joint"].append({"vanilla_streams": b_v, "speculative_streams": b_s, **cell})
            print(f"joint {b_v}+{b_s}: {cell}", flush=True)
    return out


def predictions(result: dict) -> list[dict]:
    """Each joint cell's measured step times beside the two models' predictions (ms):
    `joint_batch` = T_x(B_v + B_s) alone, `turns` = T_v(B_v) + T_s(B_s) alone."""
    alone = {pool: {int(b): c["step_ms"] for b, c in cells.items()}
             for pool, cells in result["alone"].items()}
    rows = []
    for cell in result["joint"]:
        b_v, b_s = cell["vanilla_streams"], cell["speculative_streams"]
        turns = alone["vanilla"].get(b_v, float("nan")) + alone["speculative"].get(b_s, float("nan"))
        for pool in ("vanilla", "speculative"):
            rows.append({"cell": f"{b_v}+{b_s}", "pool": pool, "measured_ms": cell[pool]["step_ms"],
                         "joint_batch_ms": alone[pool].get(b_v + b_s), "turns_ms": round(turns, 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="config (default cluster/default.yaml)")
    p.add_argument("--duration", type=float, default=12.0, help="seconds per cell")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    cfg = SpecserveConfig.from_yaml(args.config or DEFAULT_CONFIG_PATH)
    data = cfg.model_dump(mode="json")
    if "autoscaling" in data:  # one replica per pool: the cells must not change the engines
        data["autoscaling"]["enabled"] = False
    cfg = SpecserveConfig.from_dict(data)
    import ray
    from ray import serve

    from deployments.app import build_app_from_config

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    try:
        serve.run(build_app_from_config(cfg), name="specserve", route_prefix="/")
        result = asyncio.run(measure(f"http://127.0.0.1:{args.port}",
                                     cfg.model.served_model_name, args.duration))
    finally:
        serve.shutdown()
        ray.shutdown()
    result["predictions"] = predictions(result)
    print("| cell (B_v+B_s) | pool | measured step ms | T_x(B_v+B_s) alone | T_v(B_v)+T_s(B_s) |")
    print("|---|---|---|---|---|")
    for r in result["predictions"]:
        print(f"| {r['cell']} | {r['pool']} | {r['measured_ms']} | {r['joint_batch_ms']} | "
              f"{r['turns_ms']} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
