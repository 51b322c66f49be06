"""`python -m bench.budget_trace`: the budget split live against every static split of the budget.

    python -m bench.budget_trace [--out DIR] [--phase-s 240] [--systems NAME ...] [--quick]
                                 [--tpot-slo-ms 50] [--reuse EARLIER/results.json]

One time-varying trace of open-loop Poisson arrivals (requests arrive whatever the server does,
so a system that falls behind queues), replayed against each system at the same accelerator
budget B (this machine's cores; a CPU replica owns one core, deployments/cores.py):

| phase | workload (bench/workload.py) | rate |
| --- | --- | --- |
| code | code completions, greedy | `--low-rps` |
| chat | chat and creative prompts, T 0.7 / 1.0 | `--low-rps` |
| burst | the mixed workload | `--burst-rps` |
| lull | code completions, greedy | `--lull-rps` |

Systems: `vanilla-xB` (B + 0), `routed-V+S` (B - B//2 vanilla + B//2 speculative, the default
config's split), `speculative-xB` (0 + B), `vllm-switch-xB` (0 + B with vLLM's
`num_speculative_tokens_per_batch_size`: k up to `--switch-max-batch`, 0 above) and
`autoscaled` (`autoscaling.policy: budget`, each pool 0..B, starting B - B//2 + B//2; the
config's delays scaled to the phases). Every request goes `route: auto`.

Per phase and over the trace: goodput (DistServe, Zhong et al. 2024: output tokens per second of
the requests that met TTFT ≤ `--ttft-slo-ms` and TPOT ≤ `--tpot-slo-ms`, and those requests per
second), output tok/s, SLO attainment, TTFT / TPOT p99, the route mix. A request belongs to the
phase it was sent in; its tokens count over that phase's length. Replicas of each pool are polled
every `POLL_S` seconds; from `GET /admin/autoscaling` each system keeps the pools' step-time
curves at the trace's end (for `bench.autoscale_sim --live`) and the autoscaled system its
decisions.
The report opens with the targets: autoscaled ≥ 1.2x the best static split's goodput over the
trace, and ≥ 0.95x it in each phase once the split has settled (the phase's second half).
Output: DIR/results.json, DIR/report.md, DIR/replicas.png (load and replicas over time).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from bench.budget_report import AUTOSCALED, static_systems, write_report
from bench.client import Sample, stream_request
from bench.run import (add_serving_arguments, base_config, local_serve, reap_new_engines,
                       speculator_config, vllm_pids)
from bench.serve_client import warm_up
from bench.summary import Slo, percentile
from bench.workload import jobs
from core import SpecserveConfig

APP = "specserve"
POLL_S = 5.0
POOLS = ("vanilla", "speculative")


@dataclass(frozen=True, slots=True)
class Phase:
    """One stretch of the trace: `workload` arriving at `rate_rps` for `seconds`."""

    name: str
    workload: str
    rate_rps: float
    seconds: float


def phases(args: argparse.Namespace) -> list[Phase]:
    """The trace's phases (module table)."""
    return [Phase("code", "code", args.low_rps, args.phase_s),
            Phase("chat", "chat", args.low_rps, args.phase_s),
            Phase("burst", "mixed", args.burst_rps, args.phase_s),
            Phase("lull", "code", args.lull_rps, args.phase_s)]


def systems(base: SpecserveConfig, budget: int, args: argparse.Namespace
            ) -> dict[str, SpecserveConfig]:
    """{name: config} of every system at `budget` accelerators (module doc)."""
    method = base.speculative.speculator.method
    k = base.speculative.speculator.num_speculative_tokens
    split = (budget - budget // 2, budget // 2)
    top = base.speculative.max_num_seqs
    cut = min(args.switch_max_batch, top)
    schedule = [[1, cut, k], [cut + 1, top, 0]] if cut < top else [[1, top, k]]
    out = {f"vanilla-x{budget}": speculator_config(base, method, (budget, 0), args.eager),
           f"routed-{split[0]}+{split[1]}": speculator_config(base, method, split, args.eager),
           f"speculative-x{budget}": speculator_config(base, method, (0, budget), args.eager),
           f"vllm-switch-x{budget}": speculator_config(base, method, (0, budget), args.eager,
                                                       schedule)}
    data = speculator_config(base, method, split, args.eager).model_dump(mode="json")
    data["vanilla"]["num_replicas"] = data["speculative"]["num_replicas"] = 1
    data["autoscaling"] = {
        **data["autoscaling"], "enabled": True, "policy": "budget",
        "budget_accelerators": budget, "slo_tpot_ms": args.tpot_slo_ms,
        "tpot_spread": args.tpot_spread,
        "vanilla": {"min_replicas": 0, "max_replicas": budget, "initial_replicas": split[0]},
        "speculative": {"min_replicas": 0, "max_replicas": budget, "initial_replicas": split[1]},
        "upscale_delay_s": args.upscale_delay_s, "downscale_delay_s": args.downscale_delay_s,
        "demand_window_s": args.demand_window_s, "load_horizon_s": args.phase_s}
    out[AUTOSCALED] = SpecserveConfig.from_dict(data)
    if not args.systems:
        return out
    picked = {}  # in the order asked for: the riskiest first, say, in a long run
    for want in args.systems:
        picked.update({name: cfg for name, cfg in out.items()
                       if want in (name, name.split("-")[0])})
    return picked


@dataclass(slots=True)
class Sent:
    """A request of the trace: its phase, its send time (s from the trace's start) and what it
    measured."""

    phase: str
    t_s: float
    sample: Sample


async def replay(url: str, trace: list[Phase], model: str, seed: int,
                 timeline: list[dict], poll) -> list[Sent]:
    """Sends the trace's Poisson arrivals (seeded: every system gets the same requests at the
    same offsets) and polls `poll()` every POLL_S s into `timeline`; returns every request."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=2048, max_keepalive_connections=2048)
    sent: list[Sent] = []
    tasks = []
    async with httpx.AsyncClient(base_url=url, timeout=1800, limits=limits) as client:
        t0 = time.perf_counter()
        stop = asyncio.Event()

        async def poller() -> None:
            while not stop.is_set():
                row = await asyncio.to_thread(poll)
                timeline.append({"t_s": round(time.perf_counter() - t0, 1), **row})
                try:
                    await asyncio.wait_for(stop.wait(), POLL_S)
                except TimeoutError:
                    pass

        async def one(phase: str, t_s: float, job) -> None:
            s = await stream_request(client, job.path, job.body, job.task)
            sent.append(Sent(phase, t_s, s))

        polling = asyncio.create_task(poller())
        start = 0.0
        for i, ph in enumerate(trace):
            work = jobs(ph.workload, model, seed + 100 * i)
            t = start + rng.expovariate(ph.rate_rps)
            while t < start + ph.seconds:
                await asyncio.sleep(max(0.0, t - (time.perf_counter() - t0)))
                tasks.append(asyncio.create_task(one(ph.name, t, next(work))))
                t += rng.expovariate(ph.rate_rps)
            start += ph.seconds
            await asyncio.sleep(max(0.0, start - (time.perf_counter() - t0)))
        await asyncio.gather(*tasks)
        stop.set()
        await polling
    return sent


def phase_figures(sent: list[Sent], name: str, seconds: float, slo: Slo,
                  since_s: float = 0.0) -> dict:
    """Figures of the requests of phase `name` sent at or after `since_s` (s into the phase is
    the caller's business: pass the absolute time), over `seconds` of it."""
    rows = [x.sample for x in sent if x.phase == name and x.t_s >= since_s]
    ok = [s for s in rows if s.ok]
    met = [s for s in rows if slo.met(s)]
    tpot = [s.tpot_s for s in ok if s.tpot_s is not None]
    ttft = [s.ttft_s for s in ok]
    routes: dict[str, int] = {}
    for s in rows:
        routes[s.route or "-"] = routes.get(s.route or "-", 0) + 1

    def ms(values):
        p = percentile(values, 99)
        return None if p is None else round(1000 * p, 1)

    return {"requests": len(rows), "errors": len(rows) - len(ok),
            "output_tok_s": round(sum(s.completion_tokens for s in ok) / seconds, 1),
            "goodput_tok_s": round(sum(s.completion_tokens for s in met) / seconds, 1),
            "goodput_req_s": round(len(met) / seconds, 3),
            "slo_attainment": round(len(met) / max(len(rows), 1), 3),
            "tpot_p99_ms": ms(tpot), "ttft_p99_ms": ms(ttft), "routes": routes}


def summarize(sent: list[Sent], trace: list[Phase], slo: Slo) -> dict:
    """{phase: figures, phase + "@settled": its second half, "trace": all}."""
    out, start = {}, 0.0
    for ph in trace:
        out[ph.name] = phase_figures(sent, ph.name, ph.seconds, slo)
        out[f"{ph.name}@settled"] = phase_figures(sent, ph.name, ph.seconds / 2, slo,
                                                  since_s=start + ph.seconds / 2)
        start += ph.seconds
    whole = [Sent("trace", x.t_s, x.sample) for x in sent]
    out["trace"] = phase_figures(whole, "trace", start, slo)
    return out


def reused_systems(path: Path, trace: list[Phase], args: argparse.Namespace, slo: Slo
                   ) -> dict[str, dict]:
    """The static systems of an earlier run's results.json, their figures recomputed at `slo`
    from their stored requests. A static split routes by S alone, whatever the SLO, so its
    requests stand for any SLO; the autoscaled system plans for `slo_tpot_ms` and is not reused.

    Raises:
        ValueError: the earlier run replayed another trace (phases, seed or budget differ).
    """
    earlier = json.loads(path.read_text())
    if (earlier["trace"] != [asdict(ph) for ph in trace] or earlier["args"]["seed"] != args.seed
            or (args.budget and earlier["budget"] != args.budget)):
        raise ValueError(f"--reuse: {path} replayed another trace (phases, seed or budget differ)")
    out = {}
    for name in static_systems(earlier):
        system = earlier["systems"][name]
        sent = [Sent(r["phase"], r["t_s"], Sample(**{k: v for k, v in r.items()
                                                      if k not in ("phase", "t_s")}))
                for r in system["requests"]]
        out[name] = {**system, "figures": summarize(sent, trace, slo), "reused_from": str(path)}
    return out


def run_system(name: str, cfg: SpecserveConfig, trace: list[Phase], args) -> dict:
    """Deploys `cfg` as `specserve serve` does, warms it, replays the trace, deletes it."""
    from ray import serve

    from deployments.deploy import run_app

    before = vllm_pids()
    t0 = time.perf_counter()
    run_app(cfg, APP)
    start_s = time.perf_counter() - t0
    print(f"{name}: ready in {start_s:.0f} s", flush=True)
    url = f"http://127.0.0.1:{args.port}"
    model = cfg.model.served_model_name

    def poll() -> dict:
        deployments = serve.status().applications[APP].deployments
        return {p: sum(n for state, n in deployments[p].replica_states.items()
                       if str(state).endswith("RUNNING")) if p in deployments else 0
                for p in POOLS}

    try:
        asyncio.run(_warm(url, model, args.warmup,
                          [p for p in POOLS if getattr(cfg, p).num_replicas > 0]))
        timeline: list[dict] = []
        sent = asyncio.run(replay(url, trace, model, args.seed, timeline, poll))
        admin = httpx.get(url + "/admin/autoscaling", timeout=30).json()
        events = admin["events"] if cfg.autoscaling.enabled else []
    finally:
        serve.delete(APP)
        reap_new_engines(before)
    slo = Slo(args.ttft_slo_ms / 1000, args.tpot_slo_ms / 1000)
    figures = summarize(sent, trace, slo)
    for key in [p.name for p in trace] + ["trace"]:
        f = figures[key]
        print(f"{name:>16} {key:>6}: goodput {f['goodput_tok_s']:7.1f} tok/s "
              f"({f['slo_attainment']:.0%} in SLO), {f['output_tok_s']:7.1f} tok/s, "
              f"TPOT p99 {f['tpot_p99_ms']} ms, routes {f['routes']}", flush=True)
    return {"start_s": round(start_s, 1), "figures": figures, "timeline": timeline,
            "events": events, "step_times": admin["inputs"]["step_times"],
            "requests": [{"phase": x.phase, "t_s": round(x.t_s, 3), **_record(x.sample)}
                         for x in sent]}


def _record(sample: Sample) -> dict:
    """A request as results.json keeps it: every field but the per-token gaps (TTFT, latency and
    tokens give its TPOT; the gaps would make the file ~10 MB)."""
    out = asdict(sample)
    out.pop("itl_s")
    return out


async def _warm(url: str, model: str, n: int, pools: list[str]) -> None:
    """`n` mixed requests `route: auto` and as many forced to each of `pools`, the pools the app
    runs (a route to a pool it does not run is refused: 400): shapes compiled, acceptance
    learned, step times sampled (the autoscaler's split needs both pools' curves)."""
    for route in ("auto", *pools):
        await warm_up(url, model, list(itertools.islice(jobs("mixed", model, 99, route), n)), 2)


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m bench.budget_trace` (also how bench.sim_live rebuilds a
    run's configs from the arguments it recorded)."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="results folder (default bench/results/<UTC time>-"
                   "budget-trace)")
    p.add_argument("--systems", nargs="+", help="names or prefixes (vanilla, routed, "
                   "speculative, vllm, autoscaled), run in this order; default all")
    p.add_argument("--phase-s", type=float, default=240.0, help="seconds per phase")
    p.add_argument("--low-rps", type=float, default=0.4, help="arrivals/s of the code and chat "
                   "phases")
    p.add_argument("--burst-rps", type=float, default=3.0)
    p.add_argument("--lull-rps", type=float, default=0.2)
    p.add_argument("--switch-max-batch", type=int, default=16, help="vllm-switch: largest batch "
                   "that still speculates")
    p.add_argument("--upscale-delay-s", type=float, default=10.0)
    p.add_argument("--downscale-delay-s", type=float, default=30.0)
    p.add_argument("--demand-window-s", type=float, default=30.0)
    p.add_argument("--tpot-spread", type=float, default=1.0, help="autoscaled: "
                   "autoscaling.tpot_spread (plan for a mean TPOT of the SLO / this)")
    p.add_argument("--seed", type=int, default=16)
    add_serving_arguments(p, warmup=4, ttft_slo_ms=2000.0, warmup_help="warm-up requests per route")
    p.add_argument("--quick", action="store_true", help="45 s phases, eager engines: a smoke run")
    p.add_argument("--reuse", type=Path, help="an earlier run's results.json with the same trace "
                   "and seed: its static systems are taken (figures recomputed at this run's SLO) "
                   "instead of run again")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick:
        args.phase_s, args.eager = 45.0, True
    out = args.out or Path("bench/results") / time.strftime("%Y%m%d-%H%M%S-budget-trace",
                                                            time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    base = base_config(args)

    from deployments.cores import node_cores

    logging.getLogger("httpx").setLevel(logging.WARNING)
    budget = args.budget or node_cores()
    trace = phases(args)
    results: dict = {"command": " ".join(["python -m bench.budget_trace", *(argv or sys.argv[1:])]),
                     "args": {k: v if isinstance(v, (int, float, str, list, type(None)))
                              else str(v) for k, v in vars(args).items()},
                     "budget": budget, "trace": [asdict(ph) for ph in trace],
                     "slo": {"ttft_ms": args.ttft_slo_ms, "tpot_ms": args.tpot_slo_ms},
                     "systems": {}}
    t_start = time.perf_counter()
    with local_serve(args.port):
        if args.reuse:
            slo = Slo(args.ttft_slo_ms / 1000, args.tpot_slo_ms / 1000)
            results["systems"].update(reused_systems(args.reuse, trace, args, slo))
        for name, cfg in systems(base, budget, args).items():
            if name in results["systems"]:
                continue
            results["systems"][name] = run_system(name, cfg, trace, args)
            _save(results, out)
    results["wall_s"] = round(time.perf_counter() - t_start, 1)
    _save(results, out)
    print(f"results: {out}/report.md ({results['wall_s']:.0f} s)")
    return 0


def _save(results: dict, out: Path) -> None:
    """results.json, report.md and the plot, after each system (a failure keeps the rest)."""
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results))  # one line: ~1 MB for a 12-minute trace of 5 systems
    tmp.replace(out / "results.json")
    write_report(results, out)


if __name__ == "__main__":
    raise SystemExit(main())
