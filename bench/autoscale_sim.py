"""Replays a day of load (bench/trace.py) through the two pools under an autoscaling policy and a
replica profile (bench/sim_profiles.py); prints accelerator-hours and SLO attainment per policy
as a markdown table, and the target (bench/sim_verdict.py) as met or missed.

    python -m bench.autoscale_sim [--scenario gpu|cpu] [--hours 24] [--seed 8] [--sweep] [--plot PNG]

Policies (bench/sim_policies.py): `specserve` (autoscaling/rules.py, the one Serve runs,
here with observed arrivals: the budget split), Ray Serve's default queue-length policy, a
Dynamo-style throughput planner, and static splits of the budget. Scenario `gpu` (default):
16 TP=4 replicas (64 accelerators), step times from E2E Networks' EAGLE-3 A100 numbers, replica
start of minutes. Scenario `cpu`: the 70 M-parameter CPU profile of DESIGN.md §3, tp 1.

Model (fluid, 1 s ticks): a pool's in-flight requests share its replicas evenly; at most
`max_num_seqs` run per replica, the rest wait FIFO. One engine step takes T(B) at running batch
B per replica (`core.step_time.StepTimeModel`); a vanilla step emits one token per sequence, a
speculative step E[τ] of the request's task. The router sends a request of a task that gains
down the speculative path when S = E[τ]·T_v(B_v+1) / T_s(B_s+1) ≥ 1.1 (router/policy.py), and
everything to the only pool up when the other is at 0. A new replica serves after `startup_s`;
accelerators are held from its start. A request meets the SLO when (finish − arrival) / tokens
≤ slo_tpot_ms. Each simulated arrival stands for `cohort` identical requests (speed).
"""

from __future__ import annotations

import argparse
import heapq
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from bench.sim_policies import (dynamo_planner, queue_length_policy,
                                specserve_targets)
from bench.sim_profiles import CPU, GAINING_TASKS, SCENARIOS, Scenario
from bench.sim_verdict import verdict
from bench.trace import TraceParams, day_trace
from core import AutoscalingConfig, PoolScalingConfig, StepTimeModel
from core.specdecode import MIN_SPEEDUP, batched_speedup

POOLS = ("vanilla", "speculative")


@dataclass
class Pool:
    """One pool's live state in the simulation."""

    model: StepTimeModel
    target: int
    running: int
    max_num_seqs: int
    starting: list[float] = field(default_factory=list)  # ready times of replicas starting
    queue: deque = field(default_factory=deque)  # (arrival t, steps needed, tokens, weight)
    active: list = field(default_factory=list)  # heap of (finish step, arrival t, tokens, weight)
    active_w: int = 0  # sequences running
    queued_w: int = 0  # sequences waiting
    steps: float = 0.0  # engine steps every running sequence has taken so far
    recent: deque = field(default_factory=deque)  # (t, in flight) over the look-back window

    def in_flight(self) -> int:
        return self.queued_w + self.active_w

    def queued(self) -> int:
        return self.queued_w

    def batch(self) -> float:
        """Sequences running per replica (stopped replicas' sequences drain on one)."""
        return self.active_w / max(self.running, 1)

    def admit(self) -> None:
        """Starts waiting requests, oldest first, while the running replicas have slots."""
        while self.queue and self.active_w + self.queue[0][3] <= self.running * self.max_num_seqs:
            arrival, steps, tokens, w = self.queue.popleft()
            heapq.heappush(self.active, (self.steps + steps, arrival, tokens, w))
            self.active_w, self.queued_w = self.active_w + w, self.queued_w - w

    def advance(self, now: float, until: float, finished: list) -> None:
        """Runs the engines from `now` to `until` (s), the step time following the batch as
        requests finish and start; appends (finish t, arrival t, tokens, weight) to `finished`."""
        while self.active:
            step_s = self.model.step_time(self.batch())
            gap_s = (self.active[0][0] - self.steps) * step_s
            if now + gap_s > until:
                self.steps += (until - now) / step_s
                return
            now, self.steps = now + gap_s, self.active[0][0]
            while self.active and self.active[0][0] <= self.steps:
                _, arrival, tokens, w = heapq.heappop(self.active)
                self.active_w -= w
                finished.append((now, arrival, tokens, w))
            self.admit()


def route(task: str, pools: dict[str, Pool], etau: dict[str, float]) -> str:
    """The router's choice for one request (router/policy.py, measured-step-time branch)."""
    van, spec = pools["vanilla"], pools["speculative"]
    if spec.running == 0:
        return "vanilla"
    if van.running == 0:
        return "speculative"
    if task not in GAINING_TASKS:
        return "vanilla"
    s = batched_speedup(etau[task], van.model.step_time(van.batch() + 1),
                        spec.model.step_time(spec.batch() + 1))
    return "speculative" if s >= MIN_SPEEDUP else "vanilla"


def simulate(policy: str, cfg: AutoscalingConfig, trace: list, static: dict[str, int], *,
             startup_s: float, max_num_seqs: int, slo_tpot_s: float, profiles: dict,
             etau: dict[str, float] | None = None, tp: int = 1, cohort: int = 1,
             global_etau: float = 3.44, policy_interval_s: float = 1.0,
             dynamo_itl_fraction: float = 1.0) -> dict:
    """Runs the trace; returns accelerator-hours, SLO attainment, the output tokens of the requests
    that met the SLO (`met_tokens`, each request's tokens × its cohort) and replica extremes."""
    etau = etau or CPU.expected_tokens
    pools = {}
    for name in POOLS:
        model = StepTimeModel()
        model.load_profile({int(b): s for b, s in profiles[name].items()})
        n = static[name] if policy == "static" else max(1, cfg.pool(name).min_replicas)
        pools[name] = Pool(model, target=n, running=n, max_num_seqs=max_num_seqs)
    state: dict = {}
    arrivals: deque = deque()  # (t, task, tokens × cohort) over the demand window
    sent = {name: 0.0 for name in POOLS}
    accel_s, met, done, tpot_sum, met_tokens = 0.0, 0, 0, 0.0, 0
    peak = {name: 0 for name in POOLS}
    timeline: dict[int, list] = {}  # 10-min bin -> [met, done, vanilla, speculative replicas]
    end = max(r.t for r in trace) + 600
    i, t, next_policy = 0, 0.0, 0.0
    while t < end:
        t0, t = t, t + 1.0
        due: dict[str, list] = {name: [] for name in POOLS}
        while i < len(trace) and trace[i].t <= t:
            r = trace[i]
            name = route(r.task, pools, etau)  # at the batches of the tick's start
            per_step = etau[r.task] if name == "speculative" else 1.0
            due[name].append((r.t, r.tokens / per_step, r.tokens, cohort))
            sent[name] += r.tokens * cohort
            arrivals.append((r.t, r.task, r.tokens * cohort))
            i += 1
        while arrivals and arrivals[0][0] <= t - cfg.demand_window_s:
            arrivals.popleft()
        finished: list = []
        for name, p in pools.items():
            p.running += sum(1 for x in p.starting if x <= t0)
            p.starting = [x for x in p.starting if x > t0]
            p.admit()
            now = t0
            for item in due[name]:
                p.advance(now, item[0], finished)
                now = item[0]
                p.queue.append(item)
                p.queued_w += item[3]
                p.admit()
            p.advance(now, t, finished)
            p.recent.append((t, p.in_flight()))
            while p.recent[0][0] <= t - cfg.look_back_period_s:
                p.recent.popleft()
            accel_s += (p.running + len(p.starting)) * tp
            peak[name] = max(peak[name], p.running)
            if int(t) % 600 == 300:
                timeline.setdefault(int(t // 600), [0, 0, 0, 0])[2 + POOLS.index(name)] = p.running
        for finish_t, arrival, tokens, w in finished:
            tpot = (finish_t - arrival) / tokens
            ok = w * (tpot <= slo_tpot_s)
            done, tpot_sum, met = done + w, tpot_sum + tpot * w, met + ok
            met_tokens += ok * tokens
            row = timeline.setdefault(int(t // 600), [0, 0, 0, 0])
            row[0], row[1] = row[0] + ok, row[1] + w
        if policy == "static" or t < next_policy:
            continue
        next_policy = t + policy_interval_s
        ongoing = {n: sum(x for _, x in p.recent) / len(p.recent) for n, p in pools.items()}
        if policy == "specserve":
            targets, state = specserve_targets(pools, cfg, state, t, ongoing, list(arrivals),
                                               etau, GAINING_TASKS, tp)
        elif policy == "dynamo":
            targets = dynamo_planner(pools, cfg, state, t, sent, global_etau, tp,
                                     dynamo_itl_fraction)
        else:
            targets = queue_length_policy(pools, cfg, state, t, ongoing)
        _apply(pools, targets, t, startup_s, cfg.budget_accelerators, tp)
    return {"accelerator_hours": accel_s / 3600, "slo": met / max(done, 1), "done": done,
            "met_tokens": met_tokens,
            "mean_tpot_ms": 1e3 * tpot_sum / max(done, 1), "peak": peak,
            "timeline": [(b * 600, *row) for b, row in sorted(timeline.items())]}


def _apply(pools: dict[str, Pool], targets: dict[str, int], t: float, startup_s: float,
           budget: int, tp: int) -> None:
    """Starts replicas up to the free accelerators (the cluster has `budget`), stops the rest."""
    for name, p in pools.items():
        p.target = targets[name]
        while p.running + len(p.starting) > p.target:
            if p.starting:
                p.starting.pop()
            else:
                p.running -= 1
    for name, p in pools.items():
        used = tp * sum(q.running + len(q.starting) for q in pools.values())
        while p.running + len(p.starting) < p.target and used + tp <= budget:
            p.starting.append(t + startup_s)
            used += tp


# Settings each autoscaled policy is run at: one per knob value, so that each policy has an
# accelerator-hours / attainment curve (`--sweep` adds the costlier points).
RAY_TARGET_FRACTIONS = (1.0, 2 / 3, 1 / 2)
DYNAMO_ITL_FRACTIONS = (1.0, 0.8, 0.6)
SWEEP_RAY_TARGET_FRACTIONS = (5 / 12, 1 / 3, 1 / 4)
SWEEP_DYNAMO_ITL_FRACTIONS = (0.5, 0.4)
SWEEP_HEADROOMS = (1.0, 1.5, 2.0, 2.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="gpu")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--policy-interval-s", type=float, default=10.0,
                    help="seconds between policy calls (Serve's controller: 0.1)")
    ap.add_argument("--headroom", type=float, default=0.5,
                    help="specserve policy: plan for the observed load x (1 + headroom)")
    ap.add_argument("--downscale-headroom", type=float, default=0.8,
                    help="specserve policy: shrink only to a split serving load x (1 + this)")
    ap.add_argument("--sweep", action="store_true", help="also run each autoscaled policy at "
                    "costlier settings (specserve headroom, Ray's target, Dynamo's ITL target), "
                    "so that each can be compared where it reaches the SLO target")
    ap.add_argument("--plot", type=Path, help="also draw each policy's accelerator-hours / SLO "
                    "attainment points to this PNG")
    args = ap.parse_args(argv)
    sc: Scenario = SCENARIOS[args.scenario]
    tp, n = sc.tensor_parallel_size, sc.budget_replicas
    base = AutoscalingConfig(
        enabled=True, budget_accelerators=n * tp, upscale_delay_s=30, downscale_delay_s=300,
        target_ongoing_requests=sc.target_ongoing, slo_tpot_ms=sc.slo_tpot_ms,
        replica_start_s=sc.startup_s, vanilla=PoolScalingConfig(min_replicas=1, max_replicas=n),
        speculative=PoolScalingConfig(min_replicas=1, max_replicas=n))
    zero = PoolScalingConfig(min_replicas=0, max_replicas=n)
    trace = list(day_trace(TraceParams(seed=args.seed, hours=args.hours,
                                       peak_rps=sc.peak_rps / sc.cohort,
                                       base_rps=sc.base_rps / sc.cohort)))
    headrooms = (args.headroom, *(SWEEP_HEADROOMS if args.sweep else ()))
    runs = [(f"specserve policy, headroom {h:g}", "specserve",
             base.model_copy(update={"vanilla": zero, "speculative": zero, "headroom": h,
                                     "downscale_headroom": max(h, args.downscale_headroom)}),
             {}, 1.0) for h in headrooms]
    for f in RAY_TARGET_FRACTIONS + (SWEEP_RAY_TARGET_FRACTIONS if args.sweep else ()):
        cfg = base.model_copy(update={"target_ongoing_requests": sc.target_ongoing * f})
        runs.append((f"Ray Serve default, target_ongoing_requests {sc.target_ongoing * f:.3g}",
                     "queue-length", cfg, {}, 1.0))
    for f in DYNAMO_ITL_FRACTIONS + (SWEEP_DYNAMO_ITL_FRACTIONS if args.sweep else ()):
        runs.append((f"Dynamo-style planner, ITL target {sc.slo_tpot_ms * f:g} ms", "dynamo",
                     base, {}, f))
    runs += [(f"static {v}+{n - v}", "static", base, {"vanilla": v, "speculative": n - v}, 1.0)
             for v in (n, 3 * n // 4, n // 2, n // 4, 0)]
    print(f"scenario {args.scenario}: {len(trace) * sc.cohort} requests over {args.hours:g} h "
          f"(seed {args.seed}); budget {n} replicas x tp {tp} = {n * tp} accelerators; start "
          f"{sc.startup_s:g} s; SLO: time per output token incl. queueing <= {sc.slo_tpot_ms:g} ms\n")
    print("| policy | accelerator-hours | SLO attainment | mean TPOT ms | most replicas (vanilla, speculative) |")
    print("| --- | --- | --- | --- | --- |")
    results: dict[str, list] = {}
    for label, policy, cfg, static, itl in runs:
        r = simulate(policy, cfg, trace, static, startup_s=sc.startup_s,
                     max_num_seqs=sc.max_num_seqs, slo_tpot_s=sc.slo_tpot_ms / 1e3,
                     profiles=sc.profiles, etau=sc.expected_tokens, tp=tp, cohort=sc.cohort,
                     global_etau=sc.global_expected_tokens,
                     policy_interval_s=args.policy_interval_s, dynamo_itl_fraction=itl)
        results.setdefault(policy, []).append(r)
        print(f"| {label} | {r['accelerator_hours']:.1f} | {100 * r['slo']:.2f}% | "
              f"{r['mean_tpot_ms']:.2f} | {r['peak']['vanilla']}, {r['peak']['speculative']} |",
              flush=True)
    print()
    if args.plot:
        plot_frontier(results, sc.slo_tpot_ms, args.plot)
    ours = results["specserve"]
    for label, key in (("Ray Serve default", "queue-length"), ("Dynamo-style", "dynamo")):
        print(f"target vs {label}: {verdict(ours, results[key])}")
    return 0


def plot_frontier(results: dict[str, list], slo_tpot_ms: float, path: Path) -> None:
    """Accelerator-hours (x) against SLO attainment (y), one line per policy over its settings,
    the static splits as points, the 99% target as a line: where each policy reaches the target
    and at what cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {"specserve": "specserve split policy (headroom)", "queue-length":
             "Ray Serve default (target_ongoing_requests)", "dynamo": "Dynamo-style (ITL target)",
             "static": "static splits"}
    fig, ax = plt.subplots(figsize=(8, 5))
    for policy, runs in results.items():
        pts = sorted((r["accelerator_hours"], 100 * r["slo"]) for r in runs)
        ax.plot(*zip(*pts), "o" if policy == "static" else "o-", label=names.get(policy, policy),
                lw=2.5 if policy == "specserve" else 1)
    ax.axhline(99, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("accelerator-hours")
    ax.set_ylabel(f"SLO attainment, % (TPOT incl. queueing <= {slo_tpot_ms:g} ms)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
