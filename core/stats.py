"""Engine stats of each pool as plain dataclasses: what a pool replica reports and a reader sums.

The actor that holds them for the whole application is router/board.py's `StatsBoard`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PUSH_PERIOD_S = 0.5
STALE_AFTER_S = 5.0

# What a pool replica reports through Serve's `record_autoscaling_stats` (deployments/pools.py)
# and the autoscaling controller reads from `AutoscalingContext.aggregated_metrics`.
WAITING_METRIC = "specserve_waiting"  # requests waiting in the replica's engine
BUSY_METRIC = "specserve_busy"  # 1.0: the engine produced output since the last report
MEMORY_BOUND_METRIC = "specserve_memory_bound"  # memory-bound fraction, 0..1

_GAUGES = {"vllm:num_requests_running": "num_requests_running",
           "vllm:num_requests_waiting": "num_requests_waiting",
           "vllm:kv_cache_usage_perc": "kv_cache_usage"}
_COUNTERS = {"vllm:generation_tokens": "generation_tokens",
             "vllm:prompt_tokens": "prompt_tokens",
             "vllm:spec_decode_num_drafts": "num_drafts",
             "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}


@dataclass(slots=True)
class EngineStats:
    """One engine's (or a pool's summed) vLLM stats; counters are totals since engine start.

    Spec-decode counters follow vLLM (`vllm:spec_decode_*`): `num_drafts` target steps that carried
    drafts, `num_draft_tokens` proposed, `num_accepted_tokens` accepted, `accepted_per_pos[i]`
    accepted at draft position i. Derived figures (../shared/DESIGN.md §2):
    acceptance rate = accepted / draft tokens (vLLM's "acceptance rate"; not α); mean acceptance
    length = 1 + accepted / drafts (tokens per target step that carried drafts);
    per-position α_j: `per_position_acceptance(num_drafts, accepted_per_pos)`.
    """

    num_requests_running: int = 0
    num_requests_waiting: int = 0
    kv_cache_usage: float = 0.0  # fraction of KV blocks in use, 0..1
    generation_tokens: int = 0
    prompt_tokens: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    iterations: int = 0  # engine steps (count of vllm:iteration_tokens_total)
    # vllm:inter_token_latency_seconds: one observation per output of a running request after
    # its first token (one verification or decode step of that request), engine timestamps.
    itl_count: int = 0
    itl_sum_s: float = 0.0
    # The same over decode-only engine iterations, those in which no request finished its
    # prefill (deployments/engine_metrics.py `PoolStatLogger.record`): another request's prefill
    # in the step does not lengthen them.
    decode_itl_count: int = 0
    decode_itl_sum_s: float = 0.0
    # Latest busy-window sample of this replica for the router: seconds per decode step as a
    # request lives it, at a mean count of requests in the engine (running + waiting;
    # `busy_window_samples`); `step_sample_id` (the iteration count at its end)
    # lets readers take each sample once.
    step_s: float = 0.0
    step_batch: float = 0.0
    step_sample_id: int = 0
    # Startup profile of this replica: {running batch: seconds per engine step}.
    profile: dict[int, float] = field(default_factory=dict)
    # Its context cost (deployments/profile.py `profile_context_cost`): κ, seconds per step per
    # running sequence per context token (≥ 0), and the mean context (tokens) the profile ran
    # at; (0.0, 0.0): not measured.
    profile_context: tuple[float, float] = (0.0, 0.0)
    # The replica's startup check (deployments/sampling_check.py): its engine samples the
    # target's distribution on the speculative path at temperature > 0.
    lossless_sampling: bool = False
    # Capture (deployments/capture.py): rows by outcome since the replica started, and the p99 of
    # the seconds capture added to a captured request's path (0.0: capture off or no request yet).
    capture_rows: dict[str, int] = field(default_factory=dict)
    capture_added_p99_s: float = 0.0
    # The `system_fingerprint` this replica answers with: its pool and speculator checkpoint
    # (core/rollout.py `speculator_fingerprint`).
    speculator: str = ""

    @classmethod
    def from_vllm_snapshot(cls, metrics: list) -> EngineStats:
        """Sums `vllm.v1.metrics.reader.get_metrics_snapshot()` over its label sets."""
        s = cls()
        for m in metrics:
            if m.name in _GAUGES:
                attr = _GAUGES[m.name]
                setattr(s, attr, getattr(s, attr) + type(getattr(s, attr))(m.value))
            elif m.name in _COUNTERS:
                attr = _COUNTERS[m.name]
                setattr(s, attr, getattr(s, attr) + int(m.value))
            elif m.name == "vllm:iteration_tokens_total":
                s.iterations += int(m.count)
            elif m.name == "vllm:inter_token_latency_seconds":
                s.itl_count += int(m.count)
                s.itl_sum_s += float(m.sum)
            elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
                s.accepted_per_pos = _add_lists(s.accepted_per_pos, list(m.values))
        return s

    def add(self, other: EngineStats) -> None:
        """Adds another engine's stats in place (kv_cache_usage and capture_added_p99_s become
        the maximum)."""
        for name in ("num_requests_running", "num_requests_waiting", "generation_tokens",
                     "prompt_tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                     "iterations", "itl_count", "itl_sum_s", "decode_itl_count",
                     "decode_itl_sum_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.kv_cache_usage = max(self.kv_cache_usage, other.kv_cache_usage)
        self.accepted_per_pos = _add_lists(self.accepted_per_pos, other.accepted_per_pos)
        for outcome, n in other.capture_rows.items():
            self.capture_rows[outcome] = self.capture_rows.get(outcome, 0) + n
        self.capture_added_p99_s = max(self.capture_added_p99_s, other.capture_added_p99_s)


def busy_window_samples(prev: EngineStats, now: EngineStats, wall_s: float,
                        decode_only: bool = False, steady_ratio: float | None = None
                        ) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """Step-time samples of one engine over a window of `wall_s` seconds between two snapshots.

    Returns (engine_step, request_step), each (batch, seconds) or None when the engine was idle
    at either end of the window or made no progress:

    - engine_step: seconds per engine step, Δwall / Δiterations, at the mean running batch
      (the autoscaler's roofline, deployments/utilization.py);
    - request_step: seconds per decode step as a request lives it, the mean of vLLM's
      inter-token latencies in the window (Δsum / Δcount of `vllm:inter_token_latency_seconds`:
      the engine time between two outputs of one running request, each output one verification
      or decode step), at N = the mean count of requests in the engine (running + waiting).
      Steps spent on other requests' prefills and on the other pool's work on shared cores
      lengthen it; time the engine sits idle between requests, and each request's prefill, do
      not (a window's Δwall / Δsteps counts both: measured on 2 cores, it puts a speculative
      step at batch 1 at about 3x its inter-token latency, because its requests end sooner and
      leave more idle gaps). E[τ] / request_step is a request's decode token rate.
      With `decode_only` (`PoolConfig.step_samples`, its default) the mean is over the outputs
      of decode-only iterations (`decode_itl_*`), so other requests' prefills do not lengthen
      it either; None when the window had none. With `steady_ratio`
      (`PoolConfig.step_sample_steady_ratio`), None too when the count in the engine moved
      by more than one request and by more than that ratio between the two ends (a cell
      starting or draining): the mean latency then weighs the window's steps by their outputs,
      so by their batch, while N is the ends' average, and the sample would be filed at a
      batch its steps did not run. Measured on the weight-bound target (bench/results/
      2026-12-07-wide-steady-samples, 2-core AMD EPYC, 2 rounds against every window): the
      router's S as it routed within ±15% of the realized in 14 of 19 task cells against 11.
      Its step times at batch 4 looked 30-47% high with either, but that comparator (TPOT p50
      × mean acceptance length) put the speculative step 27% below the one requests lived;
      against each forced pool's mean inter-chunk latency the router's T_v(4) and T_s(4) as
      routed are +10% and +12% (bench/results/2026-12-07-wide-step-samples, Intel Xeon).
    """
    if not (prev.num_requests_running and now.num_requests_running) or wall_s <= 0:
        return None, None
    steps = now.iterations - prev.iterations
    engine_step = ((prev.num_requests_running + now.num_requests_running) / 2, wall_s / steps
                   ) if steps > 0 else None
    if decode_only:
        outputs = now.decode_itl_count - prev.decode_itl_count
        itl_s = now.decode_itl_sum_s - prev.decode_itl_sum_s
    else:
        outputs, itl_s = now.itl_count - prev.itl_count, now.itl_sum_s - prev.itl_sum_s
    n_prev = prev.num_requests_running + prev.num_requests_waiting
    n_now = now.num_requests_running + now.num_requests_waiting
    steady = (steady_ratio is None or abs(n_now - n_prev) <= 1
              or max(n_prev, n_now) <= steady_ratio * min(n_prev, n_now))
    request_step = ((n_prev + n_now) / 2, itl_s / outputs) if outputs > 0 and steady else None
    return engine_step, request_step


def per_position_acceptance(num_drafts: int, accepted_per_pos: list[int]) -> list[float]:
    """Conditional acceptance per draft position, α_1..α_k, from counts of draft steps.

    α_1 = pos[0] / drafts, α_j = pos[j-1] / pos[j-2] (../shared/DESIGN.md §2): position j is
    reached in the steps that accepted positions 1..j-1. `num_drafts` counts steps that carried
    drafts and `accepted_per_pos[j-1]` those that accepted position j (vLLM's
    `vllm:spec_decode_num_drafts` and `..._num_accepted_tokens_per_pos`). 0.0 where no step
    reached position j.

    >>> per_position_acceptance(10, [8, 4, 0, 0])
    [0.8, 0.5, 0.0, 0.0]
    """
    reached = [num_drafts, *accepted_per_pos[:-1]]
    return [n / d if d else 0.0 for n, d in zip(accepted_per_pos, reached)]


def _add_lists(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


@dataclass(slots=True)
class PoolStats:
    """A pool as the whole application sees it: live replicas, summed engine stats, and the
    requests every ingress replica has in flight to it."""

    replicas: int = 0
    in_flight: int = 0
    engine: EngineStats = field(default_factory=EngineStats)
    # Each replica's latest step-time sample: (replica id, sample id, mean batch, seconds/step).
    step_samples: list[tuple[str, int, float, float]] = field(default_factory=list)
    # Startup profiles of the pool's replicas: {running batch: mean seconds per engine step}.
    profile: dict[int, float] = field(default_factory=dict)
    # Their context cost (κ s per step per sequence per context token, reference context tokens),
    # the mean over the replicas that measured one (reference > 0); (0.0, 0.0): none did.
    profile_context: tuple[float, float] = (0.0, 0.0)
    # Context tokens of the sequences in flight to it (prompt + half the expected output each),
    # from every ingress replica: in_flight_context / in_flight is their mean context.
    in_flight_context: int = 0
    # Every live replica passed its sampling check (False while none has reported).
    lossless_sampling: bool = False

    @property
    def mean_context(self) -> float | None:
        """Mean context tokens per sequence in flight to the pool (None: none in flight, or no
        ingress counted their context)."""
        if self.in_flight <= 0 or self.in_flight_context <= 0:
            return None
        return self.in_flight_context / self.in_flight


@dataclass(slots=True)
class BoardSnapshot:
    """`StatsBoard.snapshot()`: per pool its `PoolStats`, and the board's age in seconds (below
    `STALE_AFTER_S` a pool it lists no replica of is unknown, not gone: a live replica may not
    have reported to a board that has just (re)started)."""

    pools: dict[str, PoolStats]
    age_s: float



@dataclass(slots=True)
class RouterState:
    """What ingress replicas share besides pool stats.

    Attributes:
        pin: the runtime pin ("auto", "speculative", "vanilla"); None: use the config's `router.pin`.
        acceptance: each other ingress replica's `AcceptanceEstimator.local_counts()`.
        board_epoch: the board's id since it last (re)started.
        speculators: every ingress replica's `SpeculatorTallies.counts()`, the caller's too
            (core/rollout.py).
        rollout: the speculator rollout's state as its controller last set it
            (`StatsBoard.set_rollout`; deployments/rollout.py), {} before any.
    """

    pin: str | None = None
    acceptance: list[dict] = field(default_factory=list)
    board_epoch: str = ""
    speculators: list[dict] = field(default_factory=list)
    rollout: dict = field(default_factory=dict)
