"""The expected-speedup model: S of sending one request down the speculative path, one interface.

`SpeedupModel.speedup(features, loads) -> S | None` is what the route decision asks
(router/decider.py). S = E[τ] · c_v / c_s (`core.specdecode.batched_speedup`), with E[τ] from the
acceptance measured per task type and temperature (`core.AcceptanceEstimator`) and
c each pool's cost of one sequence-step, priced by the implementation:

- `LatencySpeedup` (the HTTP ingress: a user waits for *this* request): c = T(B + 1), the step time
  at the per-replica batch the pool would run with the request, so
  S = E[τ] · T_v(B_v + 1) / T_s(B_s + 1), the batched form of Leviathan et al. 2023 evaluated at
  the batch each pool would run.
- `ThroughputSpeedup` (a batch job: no one waits, the job's tokens per second count): with
  R(n) = n / T(n / replicas) the sequence-steps per second of a pool holding n sequences, one more
  sequence adds ΔR = R(n + 1) − R(n) (0 once the pool holds max_num_seqs per replica), and
  c = 1 / ΔR, so S = E[τ] · ΔR_s / ΔR_v: a row goes speculative when it adds more tokens there.
  When neither pool adds throughput it prices as `LatencySpeedup`.

Step times T(B) are each pool's `core.StepTimeModel`, fed from the StatsBoard (startup profiles,
then busy-window samples, `update_pools`). Each replica owns its accelerators (on CPU its cores,
deployments/cores.py), so a pool's samples are filed at its own batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Mapping

from core import (AcceptanceEstimator, PoolStats, Route, StepTimeModel, TaskType, batched_speedup,
                  expected_tokens)
from router.policy import PoolLoad, RequestFeatures

PricingMode = Literal["latency", "throughput"]


@dataclass
class SpeedupModel:
    """E[τ] per task and each pool's step-time model, learned online; S from them (abstract:
    `pool_step_s` prices the pools).

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
        replica's engine (`core.stats.busy_window_samples`), filed at that pool's own batch.
        """
        for pool, stats in pools.items():
            model = self.step_times.setdefault(
                pool, StepTimeModel(max_batch=self.max_num_seqs.get(pool)))
            model.fold(stats.profile, stats.step_samples, self._seen_samples)

    def expected_tokens(self, task: TaskType, temperature: float) -> float:
        """E[τ] for this task and temperature from the current per-position α."""
        return expected_tokens(self.acceptance.alphas(task, temperature))

    def step_time(self, pool: Route, batch: float) -> float | None:
        """Predicted seconds per engine step of `pool` with `batch` requests per replica (None:
        unknown)."""
        model = self.step_times.get(pool)
        return model.step_time(batch) if model else None

    def pool_step_s(self, loads: Mapping[Route, PoolLoad]) -> dict[Route, float | None]:
        """Each pool's cost of one more sequence-step in seconds (None: unknown; `math.inf`:
        one more adds nothing)."""
        raise NotImplementedError

    def speedup(self, features: RequestFeatures, loads: Mapping[Route, PoolLoad]) -> float | None:
        """S of sending this request speculative given both pools' loads; None until both pools
        have a step time (or when one pool is not configured)."""
        cost = self.pool_step_s(loads)
        vanilla, speculative = cost.get("vanilla"), cost.get("speculative")
        if not vanilla or not speculative:
            return None
        e_tau = features.expected_tokens  # as the decider already estimated it
        if e_tau is None:
            e_tau = self.expected_tokens(features.task, features.temperature)
        return batched_speedup(e_tau, vanilla, speculative)

    def latency_step_s(self, loads: Mapping[Route, PoolLoad]) -> dict[Route, float | None]:
        """T(B + 1) of each pool: its step time at its own in-flight + 1 per replica."""
        return {pool: self.step_time(pool, (load.in_flight + 1) / max(load.replicas, 1))
                for pool, load in loads.items()}

    def curve(self, task: TaskType, temperature: float) -> list[dict]:
        """S(B) = E[τ] · T_v(B) / T_s(B) at every batch either pool has a step time for: the S a
        latency-priced request gets when both pools would run batch B, for operators and reports.

        Returns:
            Rows {"batch", "vanilla_step_ms", "speculative_step_ms", "expected_tokens",
            "speedup"}; empty until both pools are known.
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
                         "expected_tokens": round(e_tau, 3),
                         "speedup": round(batched_speedup(e_tau, t_v, t_s), 3)})
        return rows


class LatencySpeedup(SpeedupModel):
    """Prices a request by the step time it would live: c = T(B + 1) (module docstring)."""

    def pool_step_s(self, loads: Mapping[Route, PoolLoad]) -> dict[Route, float | None]:
        return self.latency_step_s(loads)


class ThroughputSpeedup(SpeedupModel):
    """Prices a batch row by the throughput it adds: c = 1 / ΔR (module docstring); when both
    pools are saturated (ΔR = 0 on each), by T(B + 1) as `LatencySpeedup`."""

    def pool_step_s(self, loads: Mapping[Route, PoolLoad]) -> dict[Route, float | None]:
        marginal = {}
        for pool, load in loads.items():
            model = self.step_times.get(pool)
            marginal[pool] = marginal_step_s(model.points() if model else {}, load.in_flight,
                                             load.replicas, self.max_num_seqs.get(pool, 1 << 30))
        if all(m == math.inf for m in marginal.values()):
            return self.latency_step_s(loads)
        return marginal


SPEEDUP_MODELS: dict[PricingMode, type[SpeedupModel]] = {"latency": LatencySpeedup,
                                                         "throughput": ThroughputSpeedup}


def marginal_step_s(points: Mapping[float, float], in_flight: int, replicas: int,
                    max_num_seqs: int) -> float | None:
    """1 / ΔR: seconds per sequence-step that one more sequence adds to a pool's throughput.

    R(n) is known at the profiled batches only, and noisily (a busy machine makes some steps slow
    at random); a difference of two noisy rates could swing the decision either way. So ΔR is the
    slope of the least concave majorant of the known points (0, 0), (n_i, R(n_i)): throughput
    with diminishing returns, never a negative or exploding gain inside the measured range. Beyond
    the largest known batch the last slope continues.

    Args:
        points: {per-replica running batch: seconds per engine step} known for the pool
            (`core.StepTimeModel.points()`).
        in_flight: sequences the pool holds now (running or queued).
        replicas: live replicas.
        max_num_seqs: running-batch cap per replica (a sequence beyond it queues: no gain).

    Returns:
        None before any step time is known; `math.inf` when one more adds nothing.
    """
    replicas = max(replicas, 1)
    curve = [(0.0, 0.0)] + [(b * replicas, b * replicas / step_s)
                            for b, step_s in sorted(points.items()) if b <= max_num_seqs]
    if len(curve) == 1:
        return None
    if in_flight + 1 > max_num_seqs * replicas:
        return math.inf
    hull: list[tuple[float, float]] = []
    for p in curve:  # upper hull, points sorted by batch
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()
        hull.append(p)
    segments = list(zip(hull, hull[1:]))
    (x0, y0), (x1, y1) = next((seg for seg in segments if in_flight < seg[1][0]), segments[-1])
    gain = (y1 - y0) / (x1 - x0)
    return 1.0 / gain if gain > 0 else math.inf


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    """> 0 when `a` lies below the line from `o` to `b`."""
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
