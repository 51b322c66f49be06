"""Replica profiles for the autoscaling simulator (bench/autoscale_sim.py): step time by batch per
pool, E[τ] per task type, and the scenario each belongs to.

`gpu`: one TP=4 GPU replica, from public numbers: E2E Networks' EAGLE-3
benchmark on A100 with vLLM (vanilla 569 / 1,069 / 3,252 tok/s at batch 4 / 8 / 32; EAGLE-3
1,312 / 2,102 / 3,186 tok/s; mean acceptance length 4.7). Step time T_v(B) = B / tok/s;
T_s(B) = B · 4.7 / tok/s (a speculative step yields 4.7 tokens per sequence at the benchmark's
acceptance). Beyond batch 32 core/step_time.py extends along the line through the last two points.
The per-task split of E[τ] is ours (not in the source), chosen so that the work-hours mix of
bench/trace.py averages ≈ 4.6 (code high, chat and creative low); 4.7 is the global figure a
Dynamo-style planner uses. The model behind the numbers is the source's; they stand for one
replica of the scenario's 16-replica budget.

`cpu`: the 70 M-parameter CPU measurement of DESIGN.md §3 (vanilla 37.5 / 415 / 1139 / 1133 tok/s
at B = 1 / 16 / 64 / 128, T_v = B / tok/s; ngram k=4 1.6 / 446 / 1070 / 1253 tok/s with
E[τ] = 3.44, T_s = B·E[τ] / tok/s), E[τ] from α per task with γ = 4.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import expected_tokens

GAINING_TASKS = ("code", "math", "extraction")  # router.speculative_tasks in the default config


@dataclass(frozen=True)
class Scenario:
    """One simulated deployment: replica curves, acceptance, sizes and the SLO.

    Attributes:
        profiles: {pool: {batch: seconds per step}}.
        expected_tokens: E[τ] per task type on the speculative path.
        global_expected_tokens: the one acceptance length a Dynamo-style planner discounts by.
        tensor_parallel_size: accelerators per replica (both pools).
        budget_replicas: replicas the budget holds (accelerators = × tensor_parallel_size).
        peak_rps: the trace's afternoon peak, requests/s.
        base_rps: the trace's night rate, requests/s.
        slo_tpot_ms: time per output token (queueing included) a request must meet.
        startup_s: seconds from a replica's start to its serving.
        max_num_seqs: running-batch cap per replica.
        target_ongoing: Ray Serve's target_ongoing_requests for the queue-length policy.
        cohort: requests per simulated arrival (identical, simultaneous), for speed.
    """

    profiles: dict
    expected_tokens: dict
    global_expected_tokens: float
    tensor_parallel_size: int
    budget_replicas: int
    peak_rps: float
    base_rps: float
    slo_tpot_ms: float
    startup_s: float
    max_num_seqs: int
    target_ongoing: float
    cohort: int


_E2E_EAGLE3 = 4.7
GPU = Scenario(
    profiles={"vanilla": {4: 4 / 569, 8: 8 / 1069, 32: 32 / 3252},
              "speculative": {4: 4 * _E2E_EAGLE3 / 1312, 8: 8 * _E2E_EAGLE3 / 2102,
                              32: 32 * _E2E_EAGLE3 / 3186}},
    expected_tokens={"code": 5.6, "math": 5.0, "extraction": 5.3, "chat": 3.8, "creative": 3.0},
    global_expected_tokens=_E2E_EAGLE3, tensor_parallel_size=4, budget_replicas=16,
    peak_rps=75.0, base_rps=4.0, slo_tpot_ms=10.0, startup_s=240.0, max_num_seqs=128,
    target_ongoing=24.0, cohort=4)

_CPU_ALPHA = {"code": 0.8, "math": 0.75, "extraction": 0.8, "chat": 0.5, "creative": 0.4}
CPU = Scenario(
    profiles={"vanilla": {1: 0.0267, 16: 0.0386, 64: 0.0562, 128: 0.113},
              "speculative": {1: 0.0609, 16: 0.123, 64: 0.206, 128: 0.351}},
    expected_tokens={t: expected_tokens([a] * 4) for t, a in _CPU_ALPHA.items()},  # k = 4
    global_expected_tokens=3.44, tensor_parallel_size=1, budget_replicas=8, peak_rps=9.0,
    base_rps=0.5, slo_tpot_ms=50.0, startup_s=60.0, max_num_seqs=128, target_ongoing=32.0,
    cohort=1)

SCENARIOS = {"gpu": GPU, "cpu": CPU}
