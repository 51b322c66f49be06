"""Autoscaling of both pools within one accelerator budget.

The pure policy, no clock and no I/O: `rules.decide(views, cfg, state, now, demand)` (the per-pool
rules, or the budget split when the offered load and both pools' step times are known:
`budget`, `split`, `goodput`, whose cost model prices S with `core.specdecode.batched_speedup`),
over `decision.PoolView` in and `decision.ScalingDecision` out. The controller Ray Serve calls:
`controller.PoolAutoscaler` (core's `POLICY_FUNCTION`), which turns Serve's
`AutoscalingContext`s into views and the decisions into replica counts. The metric names pool
replicas report for it are in `core.stats`; the signal source of the memory-bound fraction runs in
the replicas (deployments/utilization.py).

The package imports none of its modules itself (the controller loads Ray).
"""
