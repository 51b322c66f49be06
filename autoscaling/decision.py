"""What the autoscaling policy sees of a pool (`PoolView`) and answers for it
(`ScalingDecision`), shared by the per-pool rules (autoscaling/rules.py) and the budget split
(autoscaling/budget.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PoolView:
    """One pool as the policy sees it at one control-loop tick.

    Attributes:
        replicas: replicas running now.
        target: replica count Serve is steering the pool to (the last decision).
        ongoing: requests in flight to the pool (queued at handles or running in replicas),
            averaged over Serve's look-back window.
        waiting: requests waiting in the pool's engines (vLLM num_requests_waiting), summed over
            replicas; None when a running replica has not reported it.
        memory_bound: mean memory-bound fraction of the pool's replicas in [0, 1]; None when a
            running replica has not reported it.
        tensor_parallel_size: accelerators one replica holds.
        busy: fraction of the window's reports in which the pool's engines produced output, in
            [0, 1] (short requests that Serve's sampled in-flight count misses); None: unknown.
        step_times: the router's step-time model of one replica, ((batch, seconds per step as
            a request lives it), ...) (core/step_time.py `StepTimeModel.points`); (): unknown.
        max_num_seqs: the engine's running-batch cap (None: unbounded).
    """

    replicas: int
    target: int
    ongoing: float
    waiting: float | None
    memory_bound: float | None
    tensor_parallel_size: int = 1
    busy: float | None = None
    step_times: tuple[tuple[int, float], ...] = ()
    max_num_seqs: int | None = None


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """The policy's answer for one pool.

    Attributes:
        replicas: the target to run now (the old target while a change waits out its delay).
        wanted: the size the pool should have after bounds and budget.
        reason: why `wanted` (the tables of autoscaling/rules.py and autoscaling/split.py).
        previous: the target before this decision.
        pending: a change is wanted but its delay has not passed.
        gain: the budget split's predicted effect (`SplitChoice.gain`); None under the
            per-pool rules.
    """

    replicas: int
    wanted: int
    reason: str
    previous: int
    pending: bool = False
    gain: dict | None = None

    @property
    def action(self) -> str:
        """`up`, `down` or `hold`: what this decision does to the target now."""
        if self.replicas == self.previous:
            return "hold"
        return "up" if self.replicas > self.previous else "down"
