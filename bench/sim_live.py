"""`python -m bench.sim_live RESULTS`: the autoscaling simulator checked against a live run.

Takes the results.json of `python -m bench.budget_trace` and replays that run's arrivals (each
request's send time, task type and output tokens) through `bench.autoscale_sim.simulate` with
this machine's measured inputs: each pool's step-time curve as the live StatsBoard had it at the
trace's end (the same system's, else another system's run of that pool), E[τ] per task type from
the speculative requests' acceptance histograms, the replica start time `--startup-s`, and the
live config's budget and delays. Static splits run as `static`, the autoscaled system as the
specserve policy; vllm-switch has no model in the simulator and is left out.

Both sides count goodput the simulator's way: output tokens per second of the requests whose
latency / tokens ≤ the TPOT SLO (queueing included). Prints a table and the target: simulated
goodput within 15% of live for every system.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.autoscale_sim import simulate
from bench.budget_report import AUTOSCALED
from bench.budget_trace import parser, systems
from bench.summary import acceptance
from bench.trace import Request
from core import DEFAULT_CONFIG_PATH, AutoscalingConfig, SpecserveConfig

TOLERANCE = 0.15


def static_split(name: str, budget: int) -> dict[str, int] | None:
    """(vanilla, speculative) replicas of a static system by its name; None: not static."""
    if name.startswith("vanilla-x"):
        return {"vanilla": budget, "speculative": 0}
    if name.startswith("speculative-x"):
        return {"vanilla": 0, "speculative": budget}
    if name.startswith("routed-"):
        v, s = name.removeprefix("routed-").split("+")
        return {"vanilla": int(v), "speculative": int(s)}
    return None


def live_requests(system: dict) -> list[Request]:
    """The run's arrivals in send order: (send time s, task, output tokens) of each request that
    produced tokens."""
    return sorted((Request(r["t_s"], r["task"], r["completion_tokens"])
                   for r in system["requests"] if r["ok"] and r["completion_tokens"] > 0),
                  key=lambda r: r.t)


def live_goodput(system: dict, slo_tpot_s: float, seconds: float) -> float:
    """Output tok/s of the requests with latency / tokens ≤ `slo_tpot_s`."""
    return sum(r["completion_tokens"] for r in system["requests"]
               if r["ok"] and r["completion_tokens"] > 0
               and r["latency_s"] / r["completion_tokens"] <= slo_tpot_s) / seconds


def measured_profiles(results: dict, name: str) -> dict[str, dict[int, float]]:
    """{pool: {batch: s per step}}: the system's own curves, else the first run that has one."""
    out: dict[str, dict[int, float]] = {}
    for n in [name, *results["systems"]]:
        for pool, points in results["systems"][n].get("step_times", {}).items():
            out.setdefault(pool, {int(b): float(t) for b, t in points.items()})
    return out


def measured_etau(results: dict) -> dict[str, float]:
    """E[τ] per task type from every speculative request's acceptance histogram; a task no
    request drafted for gets E[τ] = 1 (speculation gains it nothing)."""
    hists: dict[str, list] = {}
    for system in results["systems"].values():
        for r in system["requests"]:
            if r["route"] == "speculative" and r["acceptance_histogram"]:
                hists.setdefault(r["task"], []).append(r["acceptance_histogram"])
    out = {t: 1.0 for t in ("code", "math", "extraction", "chat", "creative")}
    for task, h in hists.items():
        if (a := acceptance(h)) is not None:
            out[task] = a["mean_acceptance_length"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="results.json of bench.budget_trace")
    ap.add_argument("--startup-s", type=float, default=60.0, help="replica start, seconds")
    ap.add_argument("--max-num-seqs", type=int, default=128)
    args = ap.parse_args(argv)
    results = json.loads(args.results.read_text())
    budget = results["budget"]
    slo_tpot_s = results["slo"]["tpot_ms"] / 1000
    seconds = sum(ph["seconds"] for ph in results["trace"])
    etau = measured_etau(results)
    print(f"E[τ] per task (live acceptance): { {t: round(e, 2) for t, e in etau.items()} }")
    print("| system | live goodput tok/s | simulated | sim / live |\n| --- | --- | --- | --- |")
    worst = 0.0
    cfg = live_autoscaling(results)
    for name, system in results["systems"].items():
        split = static_split(name, budget)
        if split is None and name != "autoscaled":
            continue
        profiles = measured_profiles(results, name)
        missing = [p for p in ("vanilla", "speculative") if p not in profiles]
        if missing:
            print(f"| {name} | no measured step times for {missing} | | |")
            continue
        r = simulate("static" if split else "specserve", cfg, live_requests(system),
                     split or {}, startup_s=args.startup_s, max_num_seqs=args.max_num_seqs,
                     slo_tpot_s=slo_tpot_s, profiles=profiles, etau=etau, tp=1,
                     global_etau=sum(etau.values()) / len(etau))
        live = live_goodput(system, slo_tpot_s, seconds)
        sim = r["met_tokens"] / seconds
        ratio = sim / live if live else float("inf")
        worst = max(worst, abs(ratio - 1))
        print(f"| {name} | {live:.1f} | {sim:.1f} | {ratio:.2f} |")
    print(f"\ntarget: simulated goodput within {TOLERANCE:.0%} of live for every system: largest "
          f"gap {worst:.0%}: {'met' if worst <= TOLERANCE else 'missed'}")
    return 0


def live_autoscaling(results: dict) -> AutoscalingConfig:
    """The autoscaled system's autoscaling section as bench.budget_trace built it: its
    `systems(...)` from the run's recorded arguments (the parser's defaults for any an older run
    did not record) and base config. Static splits use it too (only the budget and windows
    count for them)."""
    args = parser().parse_args([])
    vars(args).update(results.get("args", {}))
    args.systems = [AUTOSCALED]
    base = SpecserveConfig.from_yaml(args.config or DEFAULT_CONFIG_PATH)
    return systems(base, results["budget"], args)[AUTOSCALED].autoscaling


if __name__ == "__main__":
    raise SystemExit(main())
