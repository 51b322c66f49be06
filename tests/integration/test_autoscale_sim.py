"""The day-shaped trace (bench/trace.py) and the autoscaling simulator (bench/autoscale_sim.py)."""

from __future__ import annotations

from bench.autoscale_sim import simulate
from bench.sim_profiles import CPU
from bench.trace import TraceParams, day_trace, diurnal
from core import AutoscalingConfig, PoolScalingConfig


def test_trace_is_seeded_and_day_shaped():
    params = TraceParams(hours=24, peak_rps=2.0, base_rps=0.2)
    a, b = list(day_trace(params)), list(day_trace(params))
    assert a == b
    per_hour = [0] * 24
    for r in a:
        per_hour[int(r.t // 3600)] += 1
    assert per_hour[16] > 5 * per_hour[4]  # afternoon peak, early-morning trough
    assert diurnal(4 * 3600) == 0 and diurnal(16 * 3600) == 1


def test_policy_scales_with_the_day_and_stays_in_budget():
    trace = list(day_trace(TraceParams(hours=24, peak_rps=6.0)))
    bounds = PoolScalingConfig(min_replicas=1, max_replicas=5)
    cfg = AutoscalingConfig(enabled=True, budget_accelerators=6, vanilla=bounds,
                            speculative=bounds, target_ongoing_requests=32,
                            upscale_delay_s=30, downscale_delay_s=300)
    kw = dict(startup_s=60, max_num_seqs=128, slo_tpot_s=0.05, profiles=CPU.profiles,
              policy_interval_s=10.0)
    scaled = simulate("specserve", cfg, trace, {}, **kw)
    static_full = simulate("static", cfg, trace, {"vanilla": 3, "speculative": 3}, **kw)
    static_min = simulate("static", cfg, trace, {"vanilla": 1, "speculative": 1}, **kw)
    assert scaled["done"] == static_full["done"] == len(trace)
    assert sum(scaled["peak"].values()) > 2  # it grew at the peak
    assert scaled["accelerator_hours"] < 0.6 * static_full["accelerator_hours"]
    assert scaled["slo"] >= 0.98 > static_min["slo"]
