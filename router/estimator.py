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

from core import Route, TaskType
from core import PoolStats
from router.acceptance import AcceptanceEstimator
from router.cost import StepTimeModel
from router.policy import PoolLoad
from router.speedup import expected_tokens


@dataclass
class RouteEstimator:
    """Online estimates for the route decision.

    Args:
        num_speculative_tokens: γ of the speculative pool.
        max_num_seqs: each pool's engine running-batch cap (vLLM `max_num_seqs`), for its
            step-time model (requests beyond it wait).
    """

    num_speculative_tokens: int
    max_num_seqs: Mapping[str, int] = field(default_factory=dict)
    acceptance: AcceptanceEstimator = None  # type: ignore[assignment]
    step_times: dict[str, StepTimeModel] = field(default_factory=dict)
    _seen_samples: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.acceptance is None:
            self.acceptance = AcceptanceEstimator(self.num_speculative_tokens)

    def update_pools(self, pools: Mapping[str, PoolStats]) -> None:
        """Folds new step-time samples and profiles from a StatsBoard snapshot (each sample once).

        A sample is seconds per decode step as a request lives it at a count of requests in the
        replica's engine (`core.stats.busy_window_samples`), filed at that pool's own
        batch: each replica owns its accelerators (on CPU its cores, deployments/cores.py), so
        one pool's load does not slow the other's steps.
        """
        for pool, stats in pools.items():
            model = self.step_times.setdefault(
                pool, StepTimeModel(max_batch=self.max_num_seqs.get(pool)))
            model.load_profile(stats.profile)
            for replica, sample_id, batch, step_s in stats.step_samples:
                if self._seen_samples.get(replica) != sample_id:
                    self._seen_samples[replica] = sample_id
                    model.observe(batch, step_s)

    def expected_tokens(self, task: TaskType, temperature: float) -> float:
        """E[τ] for this task and temperature from the current per-position α."""
        return expected_tokens(self.acceptance.alphas(task, temperature))

    def step_time(self, pool: Route, batch: float) -> float | None:
        """Predicted seconds per engine step of `pool` at running batch `batch` (None: unknown)."""
        model = self.step_times.get(pool)
        return model.step_time(batch) if model else None

    def with_step_times(self, loads: Mapping[str, PoolLoad]) -> dict[str, PoolLoad]:
        """Each pool's load with its predicted step time at the batch it would run with one more
        request, its own in-flight + 1 per replica."""
        return {pool: dataclasses.replace(
                    load, step_s=self.step_time(pool, (load.in_flight + 1) / max(load.replicas, 1)))
                for pool, load in loads.items()}

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

