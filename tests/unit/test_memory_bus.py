"""bench/memory_bus.py without engines: the ratio, the interleaving and the table."""

from __future__ import annotations

import pytest

from bench import memory_bus


def test_together_over_alone_is_the_summed_rate_over_one_engine_alone():
    assert memory_bus.together_over_alone([100.0, 100.0], [100.0, 100.0]) == 2.0
    assert memory_bus.together_over_alone([90.0, 110.0], [60.0, 60.0]) == pytest.approx(1.2)


class FakeEngine:
    """Makes `rate` tok/s alone and `rate / slowdown` when started while another engine was
    (`shared`: engines started and not yet answered, and how many ran at the last start)."""

    def __init__(self, rate: float, slowdown: float, shared: dict):
        self.rate, self.slowdown, self.shared, self.calls = rate, slowdown, shared, []

    def start(self, batch, seconds):
        self.shared["pending"] += 1
        self.shared["running"] = self.shared["pending"]
        self.calls.append(batch)

    def result(self):
        self.shared["pending"] -= 1
        return {"tok_s": self.rate / (self.slowdown if self.shared["running"] > 1 else 1.0)}


def test_measure_runs_each_engine_alone_then_both_and_the_table_gives_spreads():
    shared = {"pending": 0, "running": 0}
    engines = [FakeEngine(100.0, 1.6, shared), FakeEngine(100.0, 1.6, shared)]
    results = memory_bus.measure(engines, [1, 16], seconds=0.1, repeats=2, log=lambda _: None)
    assert set(results) == {1, 16} and all(len(rows) == 2 for rows in results.values())
    row = results[16][0]
    assert row["alone"] == [100.0, 100.0]
    assert row["ratio"] == pytest.approx(2 * 100 / 1.6 / 100)
    assert engines[0].calls == [1, 1, 16, 16] * 2  # alone, then together; batch by batch
    md = memory_bus.table(results)
    assert "| 16 | 100 [100-100] | 125 [125-125] | 1.25 [1.25-1.25]x |" in md


def test_worker_env_pins_vllm_to_the_core_and_keeps_the_engine_in_process():
    env = memory_bus.worker_env(1)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_split_ceiling_pairs_one_engine_at_b_with_both_at_half_b_in_the_same_repeat():
    # an engine whose rate grows with the batch: 60 tok/s at 8, 100 at 16 (alone or together)
    results = {8: [{"alone": [60.0, 60.0], "together": [60.0, 60.0], "ratio": 2.0},
                   {"alone": [50.0, 50.0], "together": [40.0, 40.0], "ratio": 1.6}],
               16: [{"alone": [100.0, 100.0], "together": [100.0, 100.0], "ratio": 2.0},
                    {"alone": [90.0, 110.0], "together": [100.0, 100.0], "ratio": 2.0}],
               1: [{"alone": [9.0, 9.0], "together": [9.0, 9.0], "ratio": 2.0}] * 2}
    splits = memory_bus.split_ceilings(results)
    assert set(splits) == {16}  # 8's half (4) and 1's are not measured
    assert splits[16] == [pytest.approx(1.2), pytest.approx(0.8)]
    md = memory_bus.table(results)
    assert "| 16 | 100 [100-100] | 100 [80-120] | 1.00 [0.80-1.20]x |" in md
