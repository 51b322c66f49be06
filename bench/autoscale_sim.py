"""Replays a day of load (bench/trace.py) through the two pools under an autoscaling policy and the
profiled cost model; reports accelerator-hours and SLO attainment per policy as a markdown table.

    python -m bench.autoscale_sim [--hours 24] [--seed 8] [--budget 8] [--slo-tpot-ms 50]

Policies: `specserve` (deployments/autoscaling.py, the one Serve runs), `queue-length` (Ray
Serve's default, `replica_queue_length_autoscaling_policy`: each pool on its own wants
⌈in-flight / target_ongoing_requests⌉, same bounds and delays, no shared budget, so replicas beyond
the budget wait for free accelerators) and static provisioning (fixed replicas per pool).

Model (fluid, 1 s ticks): a pool's in-flight requests share its replicas evenly; at most
`max_num_seqs` run per replica, the rest wait FIFO. One engine step takes T(B) at running batch
B per replica (`router.cost.StepTimeModel` over the profiles below); a vanilla step emits one token
per sequence, a speculative step E[τ] = (1 − α^(γ+1)) / (1 − α) (DESIGN.md §2) with α per task.
The router sends a request of a task that gains down the speculative path when S = E[τ]·T_v(B_v+1)
/ T_s(B_s+1) ≥ 1.1 (router/policy.py). A new replica serves after `startup_s`; accelerators are
held from its start. A request meets the SLO when (finish − arrival) / tokens ≤ `slo_tpot_ms`.

Profiles: seconds per engine step by batch, from the 70 M-parameter CPU measurement of DESIGN.md
§3 (vanilla tok/s 37.5 / 415 / 1139 / 1133 at B = 1 / 16 / 64 / 128, T_v = B / tok/s; ngram k=4
1.6 / 446 / 1070 / 1253 tok/s with E[τ] = 3.44, T_s = B·E[τ] / tok/s). Pass `--profiles FILE`
(JSON {"vanilla": {B: s}, "speculative": {B: s}}) for a measured replica instead.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
from collections import deque
from dataclasses import dataclass, field

from bench.trace import TraceParams, day_trace
from cluster.autoscaling_config import AutoscalingConfig, PoolScalingConfig
from deployments.autoscaling import PoolView, decide
from deployments.utilization import memory_bound_fraction
from router.cost import StepTimeModel

POOLS = ("vanilla", "speculative")
PROFILES = {"vanilla": {1: 0.0267, 16: 0.0386, 64: 0.0562, 128: 0.113},
            "speculative": {1: 0.0609, 16: 0.123, 64: 0.206, 128: 0.351}}
ALPHA = {"code": 0.8, "math": 0.75, "extraction": 0.8, "chat": 0.5, "creative": 0.4}
GAINING_TASKS = ("code", "math", "extraction")
GAMMA, MIN_SPEEDUP = 4, 1.1


def expected_tokens(alpha: float, gamma: int = GAMMA) -> float:
    """E[τ] = (1 − α^(γ+1)) / (1 − α), bonus token included (Leviathan et al. 2023, eq. 1)."""
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


@dataclass
class Pool:
    """One pool's live state in the simulation."""

    model: StepTimeModel
    target: int
    running: int
    starting: list[float] = field(default_factory=list)  # ready times of replicas starting
    queue: deque = field(default_factory=deque)  # (arrival t, steps needed, tokens)
    active: list = field(default_factory=list)  # heap of (finish step, arrival t, tokens)
    steps: float = 0.0  # engine steps every running sequence has taken so far
    recent: deque = field(default_factory=deque)  # (t, in flight) over the look-back window

    def in_flight(self) -> int:
        return len(self.queue) + len(self.active)

    def batch(self) -> float:
        return len(self.active) / self.running if self.running else 0.0


def queue_length_policy(pools: dict[str, Pool], cfg: AutoscalingConfig, state: dict,
                        now: float, ongoing: dict[str, float]) -> dict[str, int]:
    """Ray Serve's default per deployment (ray/serve/autoscaling_policy.py): desired =
    in-flight / target_ongoing_requests, bounded, applied after the same-direction delay."""
    out = {}
    for name, p in pools.items():
        b = cfg.pool(name)
        desired = min(max(math.ceil(ongoing[name] / cfg.target_ongoing_requests), b.min_replicas),
                      b.max_replicas)
        st = state.setdefault(name, {})
        if desired == p.target:
            st.clear()
            out[name] = p.target
            continue
        direction = "up" if desired > p.target else "down"
        if st.get("direction") != direction:
            st.update(direction=direction, since=now)
        delay = cfg.upscale_delay_s if direction == "up" else cfg.downscale_delay_s
        out[name] = desired if now - st["since"] >= delay else p.target
        if out[name] == desired:
            st.clear()
    return out


def route(task: str, pools: dict[str, Pool]) -> str:
    """The router's choice for one request (router/policy.py, measured-step-time branch)."""
    van, spec = pools["vanilla"], pools["speculative"]
    if spec.running == 0:
        return "vanilla"
    if van.running == 0:
        return "speculative"
    if task not in GAINING_TASKS:
        return "vanilla"
    s = expected_tokens(ALPHA[task]) * van.model.step_time(van.batch() + 1) / \
        spec.model.step_time(spec.batch() + 1)
    return "speculative" if s >= MIN_SPEEDUP else "vanilla"


def simulate(policy: str, cfg: AutoscalingConfig, trace: list, static: dict[str, int],
             *, startup_s: float, max_num_seqs: int, slo_tpot_s: float, profiles: dict) -> dict:
    """Runs the trace; returns accelerator-hours, SLO attainment and replica extremes."""
    pools = {}
    for name in POOLS:
        model = StepTimeModel()
        model.load_profile({int(b): s for b, s in profiles[name].items()})
        n = static[name] if policy == "static" else cfg.pool(name).min_replicas
        pools[name] = Pool(model, target=n, running=n)
    state, qstate = {}, {}
    accel_s, met, done, tpot_sum = 0.0, 0, 0, 0.0
    peak = {name: 0 for name in POOLS}
    end = max(r.t for r in trace) + 600
    i, t = 0, 0.0
    while t < end:
        t += 1.0
        while i < len(trace) and trace[i].t <= t:
            r = trace[i]
            name = route(r.task, pools)
            per_step = expected_tokens(ALPHA[r.task]) if name == "speculative" else 1.0
            pools[name].queue.append((r.t, r.tokens / per_step, r.tokens))
            i += 1
        for name, p in pools.items():
            p.starting, ready = [x for x in p.starting if x > t], [x for x in p.starting if x <= t]
            p.running += len(ready)
            while p.queue and len(p.active) < p.running * max_num_seqs:
                arrival, steps, tokens = p.queue.popleft()
                heapq.heappush(p.active, (p.steps + steps, arrival, tokens))
            if p.active:
                step_s = p.model.step_time(p.batch())
                p.steps += 1.0 / step_s
                while p.active and p.active[0][0] <= p.steps:
                    finish_step, arrival, tokens = heapq.heappop(p.active)
                    finish_t = t - (p.steps - finish_step) * step_s
                    tpot = (finish_t - arrival) / tokens
                    done, tpot_sum, met = done + 1, tpot_sum + tpot, met + (tpot <= slo_tpot_s)
            p.recent.append((t, p.in_flight()))
            while p.recent[0][0] <= t - cfg.look_back_period_s:
                p.recent.popleft()
            accel_s += (p.running + len(p.starting)) * 1.0
            peak[name] = max(peak[name], p.running)
        if policy != "static":
            ongoing = {n: sum(x for _, x in p.recent) / len(p.recent) for n, p in pools.items()}
            if policy == "specserve":
                views = {n: PoolView(p.running, p.target, ongoing[n], float(len(p.queue)),
                                     memory_bound_fraction(p.model, p.batch())
                                     if p.running else None)
                         for n, p in pools.items()}
                decisions, state = decide(views, cfg, state, t)
                targets = {n: d.replicas for n, d in decisions.items()}
            else:
                targets = queue_length_policy(pools, cfg, qstate, t, ongoing)
            _apply(pools, targets, t, startup_s, cfg.budget_accelerators)
    return {"accelerator_hours": accel_s / 3600, "slo": met / max(done, 1), "done": done,
            "mean_tpot_ms": 1e3 * tpot_sum / max(done, 1), "peak": peak}


def _apply(pools: dict[str, Pool], targets: dict[str, int], t: float, startup_s: float,
           budget: int) -> None:
    """Starts replicas up to the free accelerators (the cluster has `budget`), stops the rest."""
    for name, p in pools.items():
        p.target = targets[name]
        while p.running + len(p.starting) > p.target:
            if p.starting:
                p.starting.pop()
            else:
                p.running -= 1
    for name, p in pools.items():
        used = sum(q.running + len(q.starting) for q in pools.values())
        while p.running + len(p.starting) < p.target and used < budget:
            p.starting.append(t + startup_s)
            used += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--budget", type=int, default=8, help="accelerators (replicas here, tp 1)")
    ap.add_argument("--target-ongoing", type=float, default=32.0)
    ap.add_argument("--downscale-load-fraction", type=float, default=0.8,
                    help="specserve policy's shrink hysteresis (config downscale_load_fraction)")
    ap.add_argument("--slo-tpot-ms", type=float, default=50.0)
    ap.add_argument("--startup-s", type=float, default=60.0)
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--profiles", help="JSON file {pool: {batch: step seconds}}")
    args = ap.parse_args(argv)
    profiles = PROFILES if not args.profiles else json.load(open(args.profiles))
    bounds = PoolScalingConfig(min_replicas=1, max_replicas=args.budget - 1)
    cfg = AutoscalingConfig(enabled=True, budget_accelerators=args.budget, vanilla=bounds,
                            speculative=bounds, upscale_delay_s=30, downscale_delay_s=300,
                            target_ongoing_requests=args.target_ongoing,
                            downscale_load_fraction=args.downscale_load_fraction)
    trace = list(day_trace(TraceParams(seed=args.seed, hours=args.hours)))
    half = args.budget // 2
    runs = [("specserve policy", "specserve", {}),
            ("Ray Serve default (queue length)", "queue-length", {}),
            (f"static, budget ({args.budget - half}+{half})", "static",
             {"vanilla": args.budget - half, "speculative": half}),
            ("static, 2+1", "static", {"vanilla": 2, "speculative": 1}),
            ("static, 1+1", "static", {"vanilla": 1, "speculative": 1})]
    print(f"{len(trace)} requests over {args.hours:g} h (seed {args.seed}); budget {args.budget} "
          f"accelerators; SLO: time per output token incl. queueing <= {args.slo_tpot_ms:g} ms\n")
    print("| policy | accelerator-hours | SLO attainment | mean TPOT ms | peak replicas (van+spec) |")
    print("| --- | --- | --- | --- | --- |")
    for label, policy, static in runs:
        r = simulate(policy, cfg, trace, static, startup_s=args.startup_s,
                     max_num_seqs=args.max_num_seqs, slo_tpot_s=args.slo_tpot_ms / 1e3,
                     profiles=profiles)
        print(f"| {label} | {r['accelerator_hours']:.1f} | {100 * r['slo']:.1f}% | "
              f"{r['mean_tpot_ms']:.1f} | {r['peak']['vanilla']}+{r['peak']['speculative']} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
