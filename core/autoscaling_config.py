"""The `autoscaling` section of specserve's config: both pools sized by one policy, one budget.

The policy itself is `autoscaling.rules.decide`; this module only states what it may do.
Replica counts are bounded per pool (`vanilla` / `speculative`), and together by
`budget_accelerators`, counted in accelerators: a replica costs its pool's `tensor_parallel_size`
(1 on CPU, where the "accelerator" is one logical CPU slot per engine).

Example:
    >>> AutoscalingConfig(enabled=True, budget_accelerators=8,
    ...                   vanilla=PoolScalingConfig(min_replicas=1, max_replicas=4)).vanilla.max_replicas
    4
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.specdecode import MIN_SPEEDUP
from core.types import Strict


POLICY_FUNCTION = "autoscaling.controller:PoolAutoscaler"



class PoolScalingConfig(Strict):
    """Replica bounds of one pool under autoscaling."""

    min_replicas: int = Field(1, ge=0, description="Fewest replicas the policy keeps. 0 lets an "
                              "idle pool go away.")
    max_replicas: int = Field(1, ge=1, description="Most replicas the policy may run.")
    initial_replicas: int | None = Field(
        None, ge=0, description="Replicas the pool starts with (Ray Serve's `initial_replicas`), "
        "between min_replicas and max_replicas; unset: min_replicas. A pool that may go to 0 can "
        "still start serving.")

    @model_validator(mode="after")
    def _check_bounds(self) -> PoolScalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas: must be <= max_replicas")
        if self.initial_replicas is not None and not (
                self.min_replicas <= self.initial_replicas <= self.max_replicas):
            raise ValueError(f"initial_replicas: must be between min_replicas "
                             f"({self.min_replicas}) and max_replicas ({self.max_replicas}), got "
                             f"{self.initial_replicas}")
        return self

    @property
    def start_replicas(self) -> int:
        """Replicas the pool starts with: `initial_replicas`, else `min_replicas`."""
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas


class AutoscalingConfig(Strict):
    """Application-level autoscaling of both pools (Ray Serve's `autoscaling_policy`).

    Enabled, each pool's replica count comes from here (its `num_replicas` is ignored) and the
    application is deployed declaratively so that Ray Serve calls the policy for both pools at
    once (`deployments.deploy`). Every scaling decision is logged and counted with its reason.
    """

    enabled: bool = Field(False, description="Size the pools with specserve's policy; off: "
                          "each pool runs its fixed `num_replicas`.")
    policy: Literal["rules", "budget"] = Field(
        "rules", description="`rules`: each pool sized by its own load and memory-bound "
        "fraction, then fitted to the budget (autoscaling/rules.py); `budget`: the split of "
        "the budget with the best predicted goodput for the offered load the routers observe "
        "per request class and the pools' profiled step times (autoscaling/budget.py), the "
        "rules until both are known. `budget` is not yet the default: on the live trace it "
        "matches the best static split at a TPOT SLO of 50 ms on fewer accelerators but trails "
        "it at 10 ms (README, Autoscaling).")
    budget_accelerators: int = Field(
        2, ge=1, description="Accelerators both pools may hold together: the sum over pools of "
        "replicas x tensor_parallel_size never exceeds it.")
    vanilla: PoolScalingConfig = Field(default_factory=PoolScalingConfig,
                                       description="Bounds of the vanilla pool.")
    speculative: PoolScalingConfig = Field(default_factory=PoolScalingConfig,
                                           description="Bounds of the speculative pool.")
    upscale_delay_s: float = Field(
        30.0, ge=0, description="A pool grows only after the policy has wanted it bigger for "
        "this long without interruption.")
    downscale_delay_s: float = Field(
        300.0, ge=0, description="A pool shrinks only after the policy has wanted it smaller for "
        "this long without interruption.")
    target_ongoing_requests: float = Field(
        8.0, gt=0, description="Requests in flight per replica (running + queued at the replica) "
        "at which a pool counts as loaded: demand is high at or above it.")
    downscale_load_fraction: float = Field(
        0.8, gt=0, lt=1, description="Hysteresis: a pool shrinks only when its load spread over "
        "one replica fewer stays at or below this fraction of target_ongoing_requests.")
    queue_per_replica_high: float = Field(
        2.0, gt=0, description="Requests waiting in the engines per replica at which a queue "
        "counts as building.")
    memory_bound_high: float = Field(
        0.6, gt=0, le=1, description="Memory-bound fraction (deployments/utilization.py) at or "
        "above which speculative replicas count as memory-bound: speculation pays, grow the pool.")
    memory_bound_low: float = Field(
        0.3, ge=0, lt=1, description="Memory-bound fraction at or below which speculative "
        "replicas count as compute-bound: capacity shifts to vanilla. Between the two: hold.")
    slo_tpot_ms: float = Field(
        50.0, gt=0, description="Budget split (autoscaling/split.py): time per output token a "
        "split must keep (decode time over tokens, queueing in the engine included) to count as "
        "serving a load.")
    tpot_spread: float = Field(
        1.0, ge=1.0, description="Budget split: how far the requests' TPOT spreads above the "
        "mean the step-time model predicts; a split serves a class only where predicted mean "
        "TPOT x tpot_spread <= slo_tpot_ms. The model (autoscaling/goodput.py) predicts means; "
        "on 2 CPU cores at a 10 ms SLO the lived p90 / mean was 1.35-2.0 (README, Autoscaling); "
        "1: plan on the mean.")
    headroom: float = Field(
        0.2, ge=0, description="Budget split: plan for the observed load x (1 + headroom), for "
        "the load that grows while replicas start.")
    downscale_headroom: float = Field(
        0.5, ge=0, description="Budget split hysteresis: a split of fewer accelerators replaces "
        "the current one only if it would serve the observed load x (1 + downscale_headroom).")
    min_gain: float = Field(
        0.1, gt=0, lt=1, description="Budget split hysteresis: a split of no more accelerators "
        "replaces one that serves only if its predicted mean TPOT is this fraction lower; one "
        "that does not serve either only if it serves this fraction more.")
    replica_start_s: float = Field(
        120.0, gt=0, description="Budget split: seconds from a replica's target to its serving "
        "until a start has been measured; then each pool's measured start time counts.")
    demand_window_s: float = Field(
        60.0, ge=2.0, le=600.0, description="Budget split: the offered load is the routers' "
        "arrivals per request class over this many seconds (core/arrivals.py; at least a few "
        "of the routers' 0.5 s reports, at most the 600 s the StatsBoard keeps).")
    load_horizon_s: float = Field(
        600.0, gt=0, description="Budget split: how long the observed load is expected to last; "
        "a move pays only if its gain over this time exceeds what its replica starts cost.")
    utilization_source: Literal["engine", "dcgm"] = Field(
        "engine", description="`engine`: memory-bound fraction from engine stats and the profiled "
        "step times (CPU or GPU); `dcgm`: DCGM profiling fields from `dcgm_exporter_url`.")
    dcgm_exporter_url: str = Field(
        "http://127.0.0.1:9400/metrics", description="dcgm-exporter's Prometheus endpoint on the "
        "replica's node (utilization_source `dcgm`).")
    metrics_interval_s: float = Field(
        2.0, gt=0, description="How often each replica reports its stats to Serve's controller "
        "(Serve's `metrics_interval_s`).")
    look_back_period_s: float = Field(
        10.0, gt=0, description="Window over which Serve averages reported stats before the "
        "policy sees them.")
    scale_from_zero_wait_s: float = Field(
        120.0, gt=0, description="A pool with min_replicas 0 that has scaled to zero starts a "
        "replica when a request wants it. Such a request goes to the other pool when it may run "
        "there (reason `pool_scaled_to_zero`); otherwise it waits this long for the first "
        "replica, then gets 503 with Retry-After. Cover a replica's cold start.")

    @model_validator(mode="after")
    def _check(self) -> AutoscalingConfig:
        if self.memory_bound_low >= self.memory_bound_high:
            raise ValueError("memory_bound_low: must be < memory_bound_high")
        if self.downscale_headroom < self.headroom:
            raise ValueError(f"downscale_headroom: {self.downscale_headroom:g} must be >= "
                             f"headroom {self.headroom:g} (or the split would flap)")
        if self.look_back_period_s <= self.metrics_interval_s:  # Ray Serve 2.60 warns, will raise
            raise ValueError(f"look_back_period_s: {self.look_back_period_s:g} must be above "
                             f"metrics_interval_s {self.metrics_interval_s:g}")
        return self

    def pool(self, name: str) -> PoolScalingConfig:
        """Bounds of pool `name` ("vanilla" or "speculative")."""
        return getattr(self, name)


def serve_autoscaling_policy(scaling: AutoscalingConfig, tensor_parallel_size: dict[str, int],
                             max_num_seqs: dict[str, int] | None = None,
                             min_speedup: float = MIN_SPEEDUP) -> dict:
    """The application's `autoscaling_policy` entry of a Serve config (ServeDeploySchema, a
    RayService's serveConfigV2): Serve instantiates `PoolAutoscaler(**policy_kwargs)` once.

    Args:
        tensor_parallel_size: {served pool: accelerators per replica}.
        max_num_seqs: {served pool: its engines' running-batch cap}, for the budget split's
            step-time curves.
        min_speedup: the router's threshold on S (`router.min_speedup`), which the budget split
            routes by.
    """
    return {"policy_function": POLICY_FUNCTION,
            "policy_kwargs": {"config": scaling.model_dump(mode="json"),
                              "tensor_parallel_size": dict(tensor_parallel_size),
                              "max_num_seqs": dict(max_num_seqs or {}),
                              "min_speedup": min_speedup}}
