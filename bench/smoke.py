"""Small side-by-side benchmark: output tok/s of each path at concurrency 1 and 16.

    python -m bench.smoke [--url http://127.0.0.1:8000] [--concurrency 1 16] [--requests 16]

Without --url it starts the default application on a local Ray (compiled engines, ~1-3 min) and
stops it afterwards. Every request is greedy, `max_tokens` long, code prompts, with the route
forced, so the two paths serve identical work; tok/s = completion tokens / wall seconds of the level.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

PROMPTS = [
    "def fibonacci(n):\n    ", "import os\nimport sys\n\n\ndef main(argv):\n",
    "class Stack:\n    def __init__(self):\n", "def read_config(path):\n    \"\"\"Read a file.",
    "for i in range(10):\n    ", "def parse_args():\n    parser = argparse.ArgumentParser(",
    "    def __repr__(self):\n        return ", "def merge_sort(items):\n    ",
]


async def run_level(client: httpx.AsyncClient, route: str, concurrency: int, requests: int,
                    max_tokens: int, model: str) -> dict:
    """`requests` completions through `concurrency` workers; returns tok/s and latency p50."""
    queue = list(range(requests))
    tokens, latencies = 0, []

    async def worker():
        nonlocal tokens
        while queue:
            i = queue.pop()
            t0 = time.perf_counter()
            r = await client.post("/v1/completions", json={
                "model": model, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "route": route})
            r.raise_for_status()
            latencies.append(time.perf_counter() - t0)
            tokens += r.json()["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return {"tok_s": tokens / wall, "p50_s": statistics.median(latencies), "tokens": tokens}


async def bench(url: str, levels: list[int], requests: int, max_tokens: int, model: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await run_level(client, "speculative", 2, 2, 8, model)  # warm both paths
        await run_level(client, "vanilla", 2, 2, 8, model)
        print(f"{'concurrency':>11} {'vanilla tok/s':>14} {'spec tok/s':>11} {'spec/vanilla':>13}")
        for c in levels:
            n = max(requests, c)
            v = await run_level(client, "vanilla", c, n, max_tokens, model)
            s = await run_level(client, "speculative", c, n, max_tokens, model)
            print(f"{c:>11} {v['tok_s']:>14.1f} {s['tok_s']:>11.1f} {s['tok_s'] / v['tok_s']:>12.2f}x",
                  flush=True)
        metrics = (await client.get("/metrics")).text
    for line in metrics.splitlines():
        if line.startswith("specserve_spec_decode_num_") and 'pool="speculative"' in line \
                and "per_pos" not in line:
            print(line)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running specserve endpoint (default: start one)")
    p.add_argument("--config", help="config for the started application (default config)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--requests", type=int, default=16, help="requests per level (at least c)")
    p.add_argument("--max-tokens", type=int, default=128)
    args = p.parse_args(argv)
    from cluster.config import DEFAULT_CONFIG_PATH, SpecserveConfig

    cfg = SpecserveConfig.from_yaml(args.config or DEFAULT_CONFIG_PATH)
    url = args.url
    if url is None:
        import ray
        from ray import serve

        from deployments.app import build_app_from_config

        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
        serve.start(http_options={"host": cfg.server.host, "port": cfg.server.port})
        t0 = time.perf_counter()
        serve.run(build_app_from_config(cfg), name="specserve", route_prefix="/")
        print(f"application ready in {time.perf_counter() - t0:.0f} s", flush=True)
        url = f"http://{cfg.server.host}:{cfg.server.port}"
    try:
        asyncio.run(bench(url, args.concurrency, args.requests, args.max_tokens,
                          cfg.model.served_model_name))
    finally:
        if args.url is None:
            serve.shutdown()
            ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
