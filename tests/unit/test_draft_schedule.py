"""bench.draft_schedule: vLLM's num_speculative_tokens_per_batch_size from acceptance and step
times (pure)."""

from __future__ import annotations

import pytest

from bench.draft_schedule import (best_draft_length, draft_length_at, draft_length_schedule,
                                  smooth_step_times)
from core import SpeculatorConfig, expected_tokens

ALPHAS = [0.9, 0.8, 0.7, 0.6]


def _times(vanilla_s: float, per_token_s: float) -> dict[int, float]:
    """T_s(γ) = T_t(B, 1) + γ · per-token cost (draft + wider verify), γ = 0..4."""
    return {g: vanilla_s + g * per_token_s for g in range(5)}


def test_best_draft_length_maximises_tokens_per_second():
    times = _times(1.0, 0.1)
    rates = {g: expected_tokens(ALPHAS[:g]) / t for g, t in times.items()}
    assert best_draft_length(ALPHAS, times) == max(rates, key=rates.get)
    # Free drafts: the longest γ wins; drafts dearer than any gain: speculation off.
    assert best_draft_length(ALPHAS, _times(1.0, 0.0)) == 4
    assert best_draft_length(ALPHAS, _times(1.0, 1.0)) == 0
    # Only the profiled γ values compete.
    assert best_draft_length(ALPHAS, {0: 1.0, 2: 1.1}) == 2


def test_schedule_shrinks_gamma_as_batches_grow_and_vllm_accepts_it():
    # Per-token cost of speculation grows with the batch (compute-bound verify at large B).
    step_s = {1: _times(1.0, 0.05), 8: _times(1.0, 0.25), 32: _times(1.0, 0.6),
              128: _times(1.0, 2.0)}
    schedule = draft_length_schedule(ALPHAS, step_s)
    assert schedule[0][0] == 1 and schedule[-1][1] == 128
    gammas = [g for _, _, g in schedule]
    assert gammas == sorted(gammas, reverse=True) and gammas[0] == 4 and gammas[-1] == 0
    for first, last, g in schedule:  # ranges tile 1..128 and each is its profiled optimum
        for b in step_s:
            if first <= b <= last:
                assert best_draft_length(ALPHAS, step_s[b]) == g
    assert [e[1] + 1 for e in schedule[:-1]] == [e[0] for e in schedule[1:]]
    # The project's own validator (vLLM 0.32's rules) takes the table as is.
    SpeculatorConfig(method="ngram", num_speculative_tokens=4,
                     num_speculative_tokens_per_batch_size=schedule)


def test_lookup_carries_the_last_entry_on():
    schedule = [(1, 15, 4), (16, 63, 2), (64, 64, 0)]
    assert [draft_length_at(schedule, b) for b in (1, 15, 16, 64, 256)] == [4, 4, 2, 0, 0]


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="step_s"):
        best_draft_length(ALPHAS, {})
    with pytest.raises(ValueError, match="step_s"):
        best_draft_length(ALPHAS, {5: 1.0})
    with pytest.raises(ValueError, match="step_s"):
        draft_length_schedule(ALPHAS, {0: {0: 1.0}})


def test_smoothing_keeps_one_noisy_point_from_choosing_gamma():
    true = _times(1.0, 0.1)
    noisy = dict(true) | {2: true[2] * 0.75}  # one measurement 25% low, as seen on CPU
    assert best_draft_length(ALPHAS, noisy) != best_draft_length(ALPHAS, true)
    fitted = smooth_step_times({8: noisy})[8]
    assert best_draft_length(ALPHAS, fitted) == best_draft_length(ALPHAS, true)
    assert smooth_step_times({8: true})[8] == pytest.approx(true)  # a line stays itself
    assert smooth_step_times({1: {4: 2.0}}) == {1: {4: 2.0}}  # one point: nothing to fit
    outlier = smooth_step_times({1: {0: .010, 1: .012, 2: .013, 3: .014, 4: .090}})[1]
    assert min(outlier.values()) >= .010  # one outlier cannot tilt the line to <= 0 at γ = 0
    best_draft_length(ALPHAS, outlier)  # a usable profile (a step time <= 0 would raise)
    falling = smooth_step_times({1: {0: 2.0, 4: 1.0}})[1]  # noise cannot make drafts free
    assert falling[0] == falling[4] == pytest.approx(1.5)


class _FakeEngine:
    """vLLM's LLMEngine as `closed_loop` drives it: add_request / step / has_unfinished_requests.
    Request i needs i % 3 + 1 steps; each step advances every request in flight by one."""

    def __init__(self):
        self.left, self.most_in_flight, self.order, self.in_flight = {}, 0, [], []

    def add_request(self, request_id, prompt, params):
        self.left[request_id] = int(request_id) % 3 + 1
        self.order.append((request_id, prompt["prompt_token_ids"][0]))
        self.most_in_flight = max(self.most_in_flight, len(self.left))

    def has_unfinished_requests(self):
        return bool(self.left)

    def step(self):
        from types import SimpleNamespace as NS
        out = []
        self.in_flight.append(len(self.left))
        for rid in list(self.left):
            self.left[rid] -= 1
            done = self.left[rid] == 0
            if done:
                del self.left[rid]
            out.append(NS(request_id=rid, finished=done,
                          outputs=[NS(token_ids=(int(rid),) * 2)]))
        return out


def test_closed_loop_keeps_its_slots_full_and_answers_every_request_in_order():
    from bench.draft_length import closed_loop

    engine = _FakeEngine()
    prompts = [[10], [11], [12], [13]]
    loop = closed_loop(engine, prompts, slots=3, requests=10, params=None)
    assert loop.outputs == [[i, i] for i in range(10)]
    assert engine.most_in_flight == 3  # never more than the slots
    # A slot is refilled as soon as its request ends: every step runs 3 until the last
    # request is sent (requests of 1, 2, 3, 1, 2, 3, ... steps), then the loop drains.
    assert engine.in_flight == [3, 3, 3, 3, 3, 3, 1]
    assert [p for _, p in engine.order] == [10 + i % 4 for i in range(10)]
    # The steady part ends with step 5, in which the last request (9) is sent; it counts the
    # tokens of requests 0-8 (2 each, all on their first output) and not the drain after it.
    assert (loop.steady_steps, loop.steady_tokens) == (5, 18) and loop.steady_s > 0
    short = closed_loop(_FakeEngine(), prompts, slots=8, requests=2, params=None)
    assert short.outputs == [[0, 0], [1, 1]]
    assert (short.steady_steps, short.steady_tokens) == (2, 4)  # never refilled: the whole loop
