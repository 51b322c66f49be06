"""What the router expects of each path for one request: E[τ] and each pool's step time.

Feeds the pure policy (`router.policy.choose_route`) from three online sources:
- the pools' startup profiles and busy-window step-time samples (StatsBoard) → `StepTimeModel` per pool;
- each speculative response's acceptance histogram → `AcceptanceEstimator`;
- the requests in flight per pool (PressureTracker) → the batch each pool would run with this request.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from cluster.config import Route, TaskType
from deployments.stats import PoolStats
from router.acceptance import AcceptanceEstimator
from router.cost import StepTimeModel
from router.policy import PoolLoad
from router.speedup import expected_tokens


@dataclass
class RouteEstimator:
    """Online estimates for the route decision.

    Args:
        num_speculative_tokens: γ of the speculative pool.
    """

    num_speculative_tokens: int
    acceptance: AcceptanceEstimator = None  # type: ignore[assignment]
    step_times: dict[str, StepTimeModel] = field(default_factory=dict)
    _seen_samples: dict[str, int] = field(default_factory=dict)
    _seen_outputs: dict[str, int] = field(default_factory=dict)  # pool -> itl_count last snapshot

    def __post_init__(self) -> None:
        if self.acceptance is None:
            self.acceptance = AcceptanceEstimator(self.num_speculative_tokens)

    def update_pools(self, pools: Mapping[str, PoolStats], shared_compute: bool = False) -> None:
        """Folds new step-time samples and profiles from a StatsBoard snapshot (each sample once).

        A sample is seconds per decode step as a request lives it at a count of requests in the
        replica's engine (`deployments.stats.busy_window_samples`). With `shared_compute` (both
        pools on one machine's cores) the model of each pool is "the machine running B requests
        on this pool alone" (`machine_step_times` prices both pools running from it), so a
        sample is kept only when every other pool was idle: no output from its engines since
        the previous snapshot. A sample taken while the other pool also ran
        mixes both engines' work: in the session-3 benchmark, speculative steps at batch 1 beside
        7 vanilla requests, filed at the joint batch 8, made the speculative pool look faster than
        vanilla at batch 8 and sent chat (E[τ] 1.03) to it.
        """
        # vLLM's running/waiting gauges refresh only on engine steps, so an engine that went
        # idle can read 1 running for good; an engine with running requests emits outputs
        # every step, so "no output since the last snapshot" is the idle test.
        idle = {name: p.engine.itl_count == self._seen_outputs.get(name, p.engine.itl_count)
                for name, p in pools.items()}
        for pool, stats in pools.items():
            model = self.step_times.setdefault(pool, StepTimeModel())
            model.load_profile(stats.profile)
            alone = not shared_compute or all(idle[name] for name in pools if name != pool)
            for replica, sample_id, batch, step_s in stats.step_samples:
                if self._seen_samples.get(replica) != sample_id:
                    self._seen_samples[replica] = sample_id
                    if alone:
                        model.observe(batch, step_s)
        self._seen_outputs = {name: p.engine.itl_count for name, p in pools.items()}

    def expected_tokens(self, task: TaskType, temperature: float) -> float:
        """E[τ] for this task and temperature from the current per-position α."""
        return expected_tokens(self.acceptance.alphas(task, temperature))

    def step_time(self, pool: Route, batch: float) -> float | None:
        """Predicted seconds per engine step of `pool` at running batch `batch` (None: unknown)."""
        model = self.step_times.get(pool)
        return model.step_time(batch) if model else None

    def with_step_times(self, loads: Mapping[str, PoolLoad]) -> dict[str, PoolLoad]:
        """Each pool's load with its predicted step time at the batch it would run with one more
        request, its own in-flight + 1 per replica (separate accelerators; on shared compute see
        `machine_step_times`)."""
        return {pool: dataclasses.replace(
                    load, step_s=self.step_time(pool, (load.in_flight + 1) / max(load.replicas, 1)))
                for pool, load in loads.items()}

    def machine_step_times(self, loads: Mapping[str, PoolLoad], expected_tokens: float,
                           slowdown: float) -> dict[str, PoolLoad]:
        """Shared compute: each pool's step time as the machine's output rate makes it.

        With n_p requests on pool p after this request joins pool `x`, the machine produces
            R(x) = Σ_{p: n_p > 0} n_p · e_p / (T_p(n_p / replicas_p) · k)   output tokens/s,
        e_vanilla = 1 and e_speculative = `expected_tokens` (E[τ] of this request; the pool's
        other requests are counted alike), T_p the pool's step time alone (`step_times`, samples
        kept only while the other pool idled), k = `slowdown` while both pools run, 1 while one
        does. Each load gets step_s = e_x / R(x), so the policy's S = E[τ]·step_v / step_s reads
        R(speculative) / R(vanilla): a request goes where the whole machine gains more, counting
        what it costs the requests of the other pool. Both pools idle: S = E[τ]·T_v(1) / T_s(1),
        as with separate accelerators. Measured on 2 cores (bench/contention.py, 2026-12-01):
        1 vanilla + 1 speculative stream made 202 tok/s together where either pool alone at 2
        made 358-454, k 2.0-2.6 over five mixes; the joint-batch model used before (each pool
        alone at the batch of both) had predicted no loss, and sent requests to the idle pool
        beside a busy one.

        Returns:
            the loads with step_s replaced (None where a pool's step time is unknown).
        """
        tokens = {"vanilla": 1.0, "speculative": expected_tokens}

        def rate(option: str) -> float | None:
            n = {p: load.in_flight + (p == option) for p, load in loads.items()}
            active = [p for p, count in n.items() if count > 0]
            k = slowdown if len(active) > 1 else 1.0
            total = 0.0
            for p in active:
                t = self.step_time(p, n[p] / max(loads[p].replicas, 1))
                if t is None:
                    return None
                total += n[p] * tokens.get(p, 1.0) / (t * k)
            return total

        out = {}
        for pool, load in loads.items():
            r = rate(pool)
            out[pool] = dataclasses.replace(load, step_s=tokens.get(pool, 1.0) / r if r else None)
        return out

    def speedup_curve(self, task: TaskType, temperature: float) -> list[dict]:
        """S(B) = E[τ] · T_v(B) / T_s(B) at every batch either pool has a step time for.

        The same S the policy computes for a request that would make both pools' running batch B
        (router/policy.py), for operators and reports. Rows: {"batch", "vanilla_step_ms",
        "speculative_step_ms", "expected_tokens", "speedup"}; empty until both pools are known.
        """
        van, spec = self.step_times.get("vanilla"), self.step_times.get("speculative")
        if van is None or spec is None or not van.points() or not spec.points():
            return []
        e_tau = self.expected_tokens(task, temperature)
        rows = []
        for batch in sorted(set(van.points()) | set(spec.points())):
            t_v, t_s = van.step_time(batch), spec.step_time(batch)
            rows.append({"batch": batch, "vanilla_step_ms": round(1000 * t_v, 3),
                         "speculative_step_ms": round(1000 * t_s, 3),
                         "expected_tokens": round(e_tau, 3), "speedup": round(e_tau * t_v / t_s, 3)})
        return rows

