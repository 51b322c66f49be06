"""The measurements `python -m bench.run` makes on one running application: the cells of every
system (code at concurrency 1, the closed-loop sweep, the held-out sweep, Poisson rates, the
machine cell), each
sent and measured by vLLM's benchmark client (bench/serve_client.py); the router's overhead against
the stock ingress; and the in-process cost of one route decision.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import httpx

from bench.report import TASKS, curve_at, curve_row_at, predicted_steps
from bench.serve_client import Block, Load, figures, run_block, sample_requests, warm_up
from bench.summary import Slo, percentile
from bench.workload import MEAN_OUTPUT_TOKENS, TEMPERATURE, Job, jobs, long_jobs
from core import SpecserveConfig

RATE_FRACTIONS = (0.3, 0.6, 0.9)  # Poisson rates as fractions of vanilla's measured capacity


def speedup_curves(url: str, context: float | None = None) -> dict:
    """The router's S(B) curves at every workload temperature: {str(float t): `GET
    /admin/speedup?temperature=t` reply}, priced at `context` tokens per sequence when given
    (default: each pool's profile context, core/step_time.py).

    Raises:
        httpx.HTTPError: the router did not answer 200.
    """
    out = {}
    for t in sorted(set(TEMPERATURE.values())):
        params = {"temperature": t} if context is None else {"temperature": t, "context": context}
        r = httpx.get(url + "/admin/speedup", params=params, timeout=30)
        r.raise_for_status()
        out[str(float(t))] = r.json()
    return out


def step_samples(url: str, since: float) -> list[dict] | None:
    """The router's step-time samples folded after `since` (Unix seconds): `GET
    /admin/step_samples` (router/admin.py); None from an application without that endpoint.

    Raises:
        httpx.HTTPError: any other answer than 200 or 404.
    """
    r = httpx.get(url + "/admin/step_samples", params={"since": since}, timeout=30)
    if r.status_code == 404:
        return None
    r.raise_for_status()
    return r.json()["samples"]


def long_context(long_tokens: int) -> int:
    """Mean context tokens per sequence of the long cells: the prompt plus half the longest mean
    output (`MEAN_OUTPUT_TOKENS`), the context at which their S(B, L) is priced."""
    return long_tokens + max(MEAN_OUTPUT_TOKENS.values()) // 2


def predicted_s(curves: dict, batch: int) -> dict[str, float | None]:
    """{task: the router's S at the task's workload temperature and the curve's batch nearest
    `batch`} from `speedup_curves`' reply (None: no curve for the task)."""
    return {task: curve_at(curves, task, TEMPERATURE[task], batch) for task in TASKS}


def predicted_tokens(curves: dict, batch: int) -> dict[str, float | None]:
    """{task: the router's E[τ] (tokens per speculative step) at the task's workload temperature
    and the curve's batch nearest `batch`} from `speedup_curves`' reply (None: no curve)."""
    return {task: row["expected_tokens"] if (row := curve_row_at(
        curves, task, TEMPERATURE[task], batch)) else None for task in TASKS}


def alternating(workload: str, model: str, seed: int, routes: tuple[str, ...]):
    """Jobs of `workload` whose `route` cycles through `routes` (a closed loop then keeps about
    as many requests in flight on each)."""
    streams = [jobs(workload, model, seed + i, route) for i, route in enumerate(routes)]
    while True:
        for s in streams:
            yield next(s)


def block_count(blocks: int, batch: list, load: Load) -> int:
    """How many interleaved blocks a cell of `batch` requests is cut into: `blocks` (`--blocks`),
    fewer where a block of a closed loop would hold under two requests per slot (`load`'s
    concurrency), at least 1; a Poisson cell (no concurrency) is never cut: its arrival process
    is seeded, and cut short it would replay the same gaps in every block without reaching the
    rate's steady load. Each block fills and drains on its own: with two requests per slot a
    closed loop spends a good part of a block below its concurrency (measured on the tiny
    default at c16, 2026-12-06: every system's tok/s 7-12% below whole cells,
    bench/results/2026-12-06-tiny-blocks-ab/), so compare blocked systems with each other, not
    with systems measured in whole cells."""
    if load.concurrency is None:
        return 1
    return max(1, min(blocks, len(batch) // (2 * load.concurrency)))


async def measure_app(url: str, app, args, rates: list[float] | None, model: str, tokenizer,
                      machine: bool = False) -> dict:
    """Runs every cell for every system of `app` (a `bench.run.App`), the systems one after the
    other within each cell; returns {cell: {system: figures}} (`bench.serve_client.figures`).

    With `args.blocks` > 1 and several systems (the routed application's routed, forced-vanilla and
    forced-speculative), each closed-loop cell's requests are dealt into that many blocks
    (request i to block i mod k, `block_count` caps k; Poisson and machine cells stay whole) and
    the systems take turns block by block (A B C, B C A, C A B, ...), so that a drift of the
    machine's speed within the cell falls on every system alike; each system's figures are then
    computed over all its blocks as one run, and `blocks_tok_s` keeps each block's output tok/s
    (the report's block-by-block ratios).

    Args:
        rates: Poisson rates (req/s); None: fractions of the first system's measured capacity
            (returned under "poisson_rates_req_s").
        tokenizer: the target's tokenizer (vLLM's client counts prompts and outputs with it).
        machine: also the "machine@c<N>" cell at `--machine-concurrency`: every request on the
            vanilla pool ("one-pool") against requests alternating between both ("both-pools").
    """
    slo = Slo(args.ttft_slo_ms / 1000, args.tpot_slo_ms / 1000)
    cells: dict[str, dict] = {}
    wl = args.workload  # the sweep's, the Poisson cells' and the machine cell's prompts

    def plan(source, n: int, load: Load) -> tuple[list[Job], Load]:
        return list(itertools.islice(source, n)), load

    async def send(batch: list[Job], load: Load) -> Block:
        return await run_block(url, model, sample_requests(batch, tokenizer), load, slo,
                               tokenizer, [j.task for j in batch])

    for route in app.systems.values():  # warm-up: compile shapes, learn acceptance
        await warm_up(url, model, list(itertools.islice(jobs(wl, model, 99, route),
                                                        args.warmup)), 4)

    order = list(app.systems.items())

    async def cell(key: str, make) -> None:
        # each cell starts with the next system: whatever the first system at a new level pays
        # (a new batch shape, the previous cell's drain) falls on each in turn; with blocks, the
        # systems take turns block by block, each block starting with the next system again
        cells[key] = dict.fromkeys(app.systems)  # the systems' own order in the results
        plans = {name: make(route) for name, route in order}
        k = block_count(getattr(args, "blocks", 1), *plans[order[0][0]]) if len(order) > 1 else 1
        parts: dict[str, list[Block]] = {name: [] for name, _ in order}
        routed_since: float | None = None  # when the routed system's first block started
        for b in range(k):
            for name, route in order[b % len(order):] + order[:b % len(order)]:
                batch, load = plans[name]
                if name == "routed" and routed_since is None:
                    routed_since = time.time()
                parts[name].append(await send(batch[b::k], load))
                if name == "routed" and "@c" in key and len(parts[name]) == k:
                    # the S the router priced this cell with, right after its last block
                    context = long_context(args.long_tokens) if key.startswith("long@") else None
                    curves = await asyncio.to_thread(speedup_curves, url, context)
                    priced = predicted_s(curves, int(key.split("@c")[1]))
                    steps = predicted_steps(curves, int(key.split("@c")[1]))
                    tokens = predicted_tokens(curves, int(key.split("@c")[1]))
                    # each pool's slowdown ρ and the load allocation after the cell
                    # (router/policy.py `allocate`); the same in every curve reply
                    sharing = next(iter(curves.values()), {}).get("host_sharing")
                    # the samples that set those step times (those of other systems' blocks
                    # in between included when the cell is cut in blocks)
                    samples = await asyncio.to_thread(step_samples, url, routed_since)
        for name, _ in order:
            cells[key][name] = got = figures(parts[name], slo, tokenizer)
            if k > 1:
                got["blocks_tok_s"] = [round(p.result["output_throughput"], 1)
                                       for p in parts[name]]
            if name == "routed" and "@c" in key:
                got["predicted_s"], got["host_sharing"] = priced, sharing
                got["predicted_steps"], got["predicted_tokens"] = steps, tokens
                got["step_samples"] = samples
            print(f"{key:>14} {name:>24}: {_line(got)}", flush=True)
            if got.get("host_sharing"):
                print(f"{'':>14} {'':>24}  host sharing: {json.dumps(got['host_sharing'])}",
                      flush=True)
        order.append(order.pop(0))

    await cell("code@c1", lambda route: plan(jobs("code", model, 1, route), args.code_requests,
                                             Load(concurrency=1)))
    for c in args.concurrency:
        n = max(args.min_requests, args.requests_per_slot * c)
        await cell(f"{wl}@c{c}", lambda route, c=c, n=n: plan(
            jobs(wl, model, 2 + c, route), n, Load(concurrency=c)))
    for c in getattr(args, "heldout_concurrency", None) or []:  # the mix the router never saw
        if wl == "heldout":
            break
        n = max(args.min_requests, args.requests_per_slot * c)
        await cell(f"heldout@c{c}", lambda route, c=c, n=n: plan(
            jobs("heldout", model, 30 + c, route), n, Load(concurrency=c)))
    long_tokens = getattr(args, "long_tokens", 0)
    for c in getattr(args, "long_concurrency", None) or []:  # long contexts (core/step_time.py)
        n = max(args.min_requests, args.requests_per_slot * c)
        await cell(f"long@c{c}", lambda route, c=c, n=n: plan(
            long_jobs(model, tokenizer, long_tokens, 90 + c, route), n, Load(concurrency=c)))
    if machine:
        c = args.machine_concurrency
        n = max(args.min_requests, args.requests_per_slot * c)
        for name, routes in (("one-pool", ("vanilla",)),
                             ("both-pools", ("vanilla", "speculative"))):
            got = figures([await send(*plan(alternating(wl, model, 70, routes), n,
                                            Load(concurrency=c)))], slo, tokenizer)
            cells.setdefault(f"machine@c{c}", {})[name] = got
            print(f"machine@c{c:<6} {name:>24}: {_line(got)}", flush=True)
    if not args.poisson_requests:  # --poisson-requests 0 (bench.ab sets 0): no Poisson cells
        return cells
    if rates is None:  # fractions of the first system's capacity, measured by the sweep
        first = next(iter(app.systems))
        capacity = max(cells[f"{wl}@c{c}"][first]["requests"] /
                       cells[f"{wl}@c{c}"][first]["wall_s"] for c in args.concurrency)
        rates = [round(f * capacity, 2) for f in RATE_FRACTIONS]
        cells["poisson_rates_req_s"] = rates
    for j, rate in enumerate(rates):
        await cell(f"poisson@{rate:.2f}", lambda route, rate=rate, j=j: plan(
            jobs(wl, model, 50 + j, route), args.poisson_requests,
            Load(rate_req_s=rate, seed=j)))
    return cells


def _line(s: dict) -> str:
    acc = s["acceptance"]
    return (f"{s['output_tok_s']:8.1f} tok/s  TTFT p50 {s['ttft_p50_ms']} ms  TPOT p50 "
            f"{s['tpot_p50_ms']} p99 {s['tpot_p99_ms']} ms  goodput {s['goodput_req_s']} req/s  "
            f"errors {s['errors']}  routes {s['route_mix']}  acceptance "
            f"{acc['mean_acceptance_length'] if acc else '-'}  cores {s['cpu']}")


async def measure_overhead(url: str, model: str, n: int, concurrency: int = 1) -> dict:
    """Latency of 1-token non-streamed requests: specserve (route=vanilla) vs the stock ingress
    on the same vanilla pool, in alternating rounds of `concurrency` concurrent requests per path
    until each has `n`; overhead = difference of the percentiles (ms)."""
    body = {"model": model, "prompt": "def f(x):", "max_tokens": 1, "temperature": 0}
    lat: dict[str, list[float]] = {"specserve": [], "direct": []}
    limits = httpx.Limits(max_connections=2 * concurrency + 8)

    async def one(client, path, extra) -> float:
        t0 = time.perf_counter()
        r = await client.post(path, json={**body, **extra})
        r.raise_for_status()
        return time.perf_counter() - t0

    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        rounds = -(-n // concurrency)
        for i in range(rounds + 1):
            for name, path, extra in (("specserve", "/v1/completions", {"route": "vanilla"}),
                                      ("direct", "/direct/v1/completions", {})):
                times = await asyncio.gather(*(one(client, path, extra)
                                               for _ in range(concurrency)))
                if i > 0:  # the first round warms both paths up
                    lat[name] += times
    out = {f"{name}_p{q}_ms": round(1000 * percentile(v, q), 2)
           for name, v in lat.items() for q in (50, 99)}
    for q in (50, 99):
        out[f"overhead_p{q}_ms"] = round(out[f"specserve_p{q}_ms"] - out[f"direct_p{q}_ms"], 2)
    out["requests"], out["concurrency"] = len(lat["direct"]), concurrency
    return out


def measure_decision_latency(cfg: SpecserveConfig, n: int = 2000) -> dict:
    """In-process time of one route decision (`RouteDecider.parse` then `route`: validation,
    classifier, S, policy, admission) on mixed-workload bodies with step times loaded, p50/p99
    in microseconds: the router's own CPU cost per request.
    """
    import itertools

    from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest

    from core import PoolStats
    from router.decider import RouteDecider

    decider = RouteDecider(cfg, ["vanilla", "speculative"])
    decider.speedup_model.update_pools({"vanilla": PoolStats(profile={1: 0.01, 64: 0.1}),
                                        "speculative": PoolStats(profile={1: 0.02, 64: 0.4})})
    decider.pressure.start("vanilla", 3)
    decider.pressure.start("speculative", 2)
    bodies = [(ChatCompletionRequest if "messages" in j.body else CompletionRequest)(**j.body)
              for j in itertools.islice(jobs("mixed", cfg.model.served_model_name, 7), n)]
    times = []

    async def decide_all() -> None:
        for body in bodies:  # parse and route: what the ingress runs per request
            t0 = time.perf_counter()
            await decider.route(decider.parse(body))
            times.append(time.perf_counter() - t0)

    asyncio.run(decide_all())
    return {"decisions": n, "p50_us": round(1e6 * percentile(times, 50), 1),
            "p99_us": round(1e6 * percentile(times, 99), 1)}
