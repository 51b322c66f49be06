"""What the router expects of each path for one request: E[τ] and each pool's step time.

Feeds the pure policy (`router.policy.choose_route`) from three online sources:
- the pools' startup profiles and busy-window step-time samples (StatsBoard) → `StepTimeModel` per pool;
- each speculative response's acceptance histogram → `AcceptanceEstimator`;
- the requests in flight per pool (PressureTracker) → the batch each pool would run with this request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from cluster.config import Route, TaskType
from deployments.stats import PoolStats
from router.acceptance import AcceptanceEstimator
from router.cost import StepTimeModel
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

    def __post_init__(self) -> None:
        if self.acceptance is None:
            self.acceptance = AcceptanceEstimator(self.num_speculative_tokens)

    def update_pools(self, pools: Mapping[str, PoolStats]) -> None:
        """Folds new step-time samples and profiles from a StatsBoard snapshot (each sample once)."""
        for pool, stats in pools.items():
            model = self.step_times.setdefault(pool, StepTimeModel())
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
