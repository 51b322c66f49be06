"""Soak: mixed load against a running specserve for a while, then checks that nothing leaked.

    python -m bench.soak --url http://127.0.0.1:8000 [--duration-s 300] [--concurrency 8]

Each worker loops over a mix of request kinds: non-streaming and streaming completions (auto and
forced routes), chat, streams abandoned after two chunks (client disconnects), and bad requests.
Every `--sample-s` it records the ingress's in-flight counts (/health), the engines' running and
waiting requests (/metrics) and, when the server runs on this machine, the resident memory of each
Serve replica process. At the end it waits for the server to drain, sends one request per pool
(so each engine steps and republishes its gauges) and reports:

    lost     requests that got a 5xx, a cut stream, a client error or a timeout (must be 0)
    leaked   requests still in flight at the ingress or in an engine after the drain (must be 0)
    memory   RSS of each replica process, first sample after warm-up vs last (MiB)

Exit status 1 when lost or leaked is not 0, or a replica's memory grew by more than
`--max-rss-growth-mib`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time

import httpx
import psutil

MODEL = "specserve-tiny"
PROMPTS = ["def fibonacci(n):\n    ", "import os\nimport sys\n\n\ndef main(argv):\n",
           "The history of the city begins", "Compute 17 * 23 step by step:",
           "class Stack:\n    def __init__(self):\n"]
BAD = [{"model": MODEL, "prompt": "x", "max_tokens": 0},
       {"model": "nope", "prompt": "x"},
       {"model": MODEL, "prompt": "x", "temperature": 9},
       {"model": MODEL, "prompt": [1, 999999]}]
REPLICA_TITLE = "ray::ServeReplica:specserve:"
KINDS = ["plain", "stream", "chat", "abandon", "bad"]
WEIGHTS = [4, 3, 2, 2, 1]


class Tally:
    """Outcomes and latencies per request kind."""

    def __init__(self):
        self.outcomes: dict[str, dict[str, int]] = {k: {} for k in KINDS}
        self.latencies: list[float] = []

    def add(self, kind: str, outcome: str, seconds: float) -> None:
        self.outcomes[kind][outcome] = self.outcomes[kind].get(outcome, 0) + 1
        if outcome == "ok":
            self.latencies.append(seconds)

    def lost(self) -> int:
        return sum(n for kind in self.outcomes.values() for o, n in kind.items()
                   if o not in ("ok", "rejected_429"))


async def one(client: httpx.AsyncClient, kind: str, rng: random.Random) -> str:
    """Sends one request of `kind`; returns its outcome ("ok" when it did what it should)."""
    body = {"model": MODEL, "prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(8, 64),
            "temperature": rng.choice([0, 0, 0.8]),
            "route": rng.choice(["auto", "auto", "speculative", "vanilla"])}
    if kind == "bad":
        r = await client.post("/v1/completions", json=rng.choice(BAD))
        return "ok" if 400 <= r.status_code < 500 and "error" in r.json() else f"http_{r.status_code}"
    if kind in ("plain", "chat"):
        if kind == "chat":
            body["messages"] = [{"role": "user", "content": body.pop("prompt")}]
        r = await client.post("/v1/chat/completions" if kind == "chat" else "/v1/completions",
                              json=body)
        return "ok" if r.status_code == 200 else _status(r.status_code)
    async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        if r.status_code != 200:
            return _status(r.status_code)
        chunks = 0
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return "error_event"
                chunks += 1
                if kind == "abandon" and chunks == 2:
                    return "ok"  # leaving the block closes the connection mid-stream
                if chunk["choices"] and chunk["choices"][0].get("finish_reason"):
                    return "ok"
    return "cut_stream"


def _status(code: int) -> str:
    return "rejected_429" if code == 429 else f"http_{code}"


async def worker(client: httpx.AsyncClient, tally: Tally, until: float, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        kind = rng.choices(KINDS, WEIGHTS)[0]
        t0 = time.monotonic()
        try:
            outcome = await one(client, kind, rng)
        except httpx.HTTPError as e:
            outcome = f"client_{type(e).__name__}"
        tally.add(kind, outcome, time.monotonic() - t0)


async def server_state(client: httpx.AsyncClient) -> dict:
    """In flight per pool at the ingress, and engine running + waiting per pool."""
    health = (await client.get("/health")).json()["pools"]
    engine: dict[str, float] = {}
    for line in (await client.get("/metrics")).text.splitlines():
        for gauge in ("specserve_pool_num_requests_running", "specserve_pool_num_requests_waiting"):
            if line.startswith(gauge + "{"):
                pool = line.split('pool="')[1].split('"')[0]
                engine[pool] = engine.get(pool, 0) + float(line.rsplit(" ", 1)[1])
    return {"in_flight": {p: v["in_flight"] for p, v in health.items()}, "engine": engine}


def replica_rss_mib() -> dict[str, float]:
    """RSS of each local Serve replica process of specserve, keyed `deployment[pid]` (MiB).

    Ray titles a replica `ray::ServeReplica:<app>:<deployment>`, with `.<method>` appended while
    it runs one, so the key keeps only the deployment.
    """
    out = {}
    for p in psutil.process_iter(["cmdline", "memory_info"]):
        title = " ".join(p.info["cmdline"] or [])
        if title.startswith(REPLICA_TITLE) and p.info["memory_info"]:
            deployment = title[len(REPLICA_TITLE):].split(".")[0].split()[0]
            out[f"{deployment}[{p.pid}]"] = p.info["memory_info"].rss / 2**20
    return out


async def soak(url: str, duration_s: float, concurrency: int, sample_s: float,
               warmup_s: float = 10.0, drain_s: float = 15.0) -> dict:
    """Runs the load and returns the report (see the module docstring)."""
    tally, samples = Tally(), []
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        t0 = time.monotonic()
        until = t0 + duration_s
        workers = [asyncio.create_task(worker(client, tally, until, seed))
                   for seed in range(concurrency)]
        while time.monotonic() < until:
            await asyncio.sleep(sample_s)
            samples.append({"t_s": round(time.monotonic() - t0, 1), **await server_state(client),
                            "rss_mib": replica_rss_mib()})
        await asyncio.gather(*workers)
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            if not any((await server_state(client))["in_flight"].values()):
                break
            await asyncio.sleep(0.5)
        for pool in ("vanilla", "speculative"):  # each engine steps, so its gauges refresh
            await client.post("/v1/completions", json={"model": MODEL, "prompt": "x",
                                                        "max_tokens": 1, "route": pool})
        await asyncio.sleep(1.5)  # pools push stats every 0.5 s
        end = await server_state(client)
    steady = [s for s in samples if s["t_s"] >= warmup_s] or samples
    rss = {}
    if steady:
        for proc, first in steady[0]["rss_mib"].items():
            last = steady[-1]["rss_mib"].get(proc)
            if last is not None:
                rss[proc] = {"first": round(first), "last": round(last),
                             "growth": round(last - first)}
    lat = sorted(tally.latencies)
    requests = sum(sum(k.values()) for k in tally.outcomes.values())
    return {"duration_s": duration_s, "concurrency": concurrency, "requests": requests,
            "outcomes": tally.outcomes, "lost": tally.lost(),
            "leaked": int(sum(end["in_flight"].values()) + sum(end["engine"].values())),
            "end_state": end,
            "latency_s": {"p50": round(statistics.median(lat), 3),
                          "p99": round(lat[int(0.99 * (len(lat) - 1))], 3)} if lat else None,
            "rss_mib": rss,
            "max_in_flight": max((sum(s["in_flight"].values()) for s in samples), default=0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--duration-s", type=float, default=300)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--sample-s", type=float, default=5)
    p.add_argument("--max-rss-growth-mib", type=float, default=200)
    args = p.parse_args(argv)
    report = asyncio.run(soak(args.url, args.duration_s, args.concurrency, args.sample_s))
    print(json.dumps(report, indent=2))
    grew = [k for k, v in report["rss_mib"].items() if v["growth"] > args.max_rss_growth_mib]
    return 1 if report["lost"] or report["leaked"] or grew else 0


if __name__ == "__main__":
    sys.exit(main())
