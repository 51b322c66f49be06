"""The live budget-trace benchmark's pure parts: the trace's phases, the systems at one budget,
per-phase goodput (by send time, within the SLO), the targets' ratios and the report."""

import argparse
import itertools
import json
from dataclasses import asdict

import pytest

from bench.sim_verdict import hours_at, verdict
from bench.budget_report import mean_accelerators, targets, write_report
from bench.budget_trace import Sent, parser, phases, reused_systems, summarize, systems
from bench.client import Sample
from bench.sim_live import live_goodput, measured_etau, measured_profiles, static_split
from bench.summary import Slo
from bench.workload import jobs
from core import DEFAULT_CONFIG_PATH, SpecserveConfig

SLO = Slo(ttft_s=1.0, tpot_s=0.05)


def args(**kw) -> argparse.Namespace:
    """The command line's defaults (bench.budget_trace.parser), with these values."""
    ns = parser().parse_args([])
    vars(ns).update({"phase_s": 100.0, "low_rps": 0.5, "eager": True} | kw)
    return ns


def sample(tokens: int, tpot_s: float, ttft_s: float = 0.1, route: str = "vanilla") -> Sample:
    return Sample(task="code", ok=True, ttft_s=ttft_s, completion_tokens=tokens, route=route,
                  latency_s=ttft_s + tpot_s * (tokens - 1))


def test_chat_workload_is_chat_and_creative_prompts():
    got = list(itertools.islice(jobs("chat", "m", seed=1), 100))
    assert {j.task for j in got} == {"chat", "creative"}


def test_every_system_holds_the_same_budget():
    base = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    got = systems(base, 2, args())
    assert list(got) == ["vanilla-x2", "routed-1+1", "speculative-x2", "vllm-switch-x2",
                         "autoscaled"]
    for name, cfg in got.items():
        most = sum(cfg.most_replicas(p) * getattr(cfg, p).tensor_parallel_size
                   for p in cfg.pools())
        if cfg.autoscaling.enabled:
            assert cfg.autoscaling.budget_accelerators == 2 and cfg.autoscaling.policy == "budget"
            assert [cfg.initial_replicas(p) for p in cfg.pools()] == [1, 1]
            assert {cfg.autoscaling.pool(p).min_replicas for p in cfg.pools()} == {0}
        else:
            assert most == 2, name
    schedule = got["vllm-switch-x2"].speculative.speculator.num_speculative_tokens_per_batch_size
    assert tuple(schedule[0]) == (1, 16, 4) and schedule[1][2] == 0
    assert list(systems(base, 2, args(systems=["autoscaled", "vllm", "routed-1+1"]))) == [
        "autoscaled", "vllm-switch-x2", "routed-1+1"]  # in the order asked for


def test_goodput_counts_the_tokens_of_requests_within_the_slo_by_send_phase():
    trace = phases(args(phase_s=100.0))
    sent = [Sent("code", 10.0, sample(100, 0.01)),           # met
            Sent("code", 60.0, sample(50, 0.2)),             # TPOT missed
            Sent("code", 70.0, sample(30, 0.01, ttft_s=3)),  # TTFT missed
            Sent("chat", 150.0, sample(40, 0.01)),
            Sent("burst", 260.0, Sample(task="chat", error="429"))]
    f = summarize(sent, trace, SLO)
    assert f["code"]["goodput_tok_s"] == 1.0 and f["code"]["output_tok_s"] == 1.8
    assert f["code"]["slo_attainment"] == pytest.approx(1 / 3, abs=1e-3)
    assert f["code@settled"]["requests"] == 2 and f["code@settled"]["goodput_tok_s"] == 0.0
    assert f["burst"]["errors"] == 1 and f["burst"]["routes"] == {"-": 1}
    assert f["trace"]["goodput_tok_s"] == pytest.approx(140 / 400, abs=0.05)  # 0.1 tok/s rounding


def _results(auto_tok: float, static_tok: dict) -> dict:
    trace = phases(args(phase_s=100.0))
    out = {"command": "t", "budget": 2, "trace": [asdict(p) for p in trace],
           "slo": {"ttft_ms": 1000.0, "tpot_ms": 50.0}, "systems": {}}
    for name, tok in {**static_tok, "autoscaled": auto_tok}.items():
        sent = [Sent(p.name, 100.0 * i + s, sample(int(tok), 0.01))
                for i, p in enumerate(trace) for s in (10.0, 60.0)]
        out["systems"][name] = {"start_s": 1.0, "figures": summarize(sent, trace, SLO),
                                "timeline": [{"t_s": 0.0, "vanilla": 1, "speculative": 1}],
                                "events": [], "requests": [
                                    {"phase": x.phase, "t_s": x.t_s, **asdict(x.sample)}
                                    for x in sent]}
    return out


def test_targets_compare_with_the_best_static_system(tmp_path):
    met = targets(_results(130, {"vanilla-x2": 100, "routed-1+1": 80}))
    assert "1.30x" in met[0] and "met" in met[0] and "vanilla-x2" in met[0]
    missed = targets(_results(90, {"vanilla-x2": 100, "routed-1+1": 80}))
    assert "0.90x" in missed[0] and "missed" in missed[0] and "0.90x" in missed[1]
    write_report(_results(90, {"vanilla-x2": 100}), tmp_path)
    assert "## Targets" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "replicas.png").stat().st_size > 10_000


def test_mean_accelerators_integrate_the_polled_replicas():
    system = {"timeline": [{"t_s": 0.0, "vanilla": 1, "speculative": 1},
                           {"t_s": 100.0, "vanilla": 0, "speculative": 1},
                           {"t_s": 300.0, "vanilla": 2, "speculative": 0}]}
    assert mean_accelerators(system, 400.0) == pytest.approx((200 + 200 + 200) / 400)
    assert mean_accelerators(system, 400.0, tp=4) == pytest.approx(4 * 1.5)
    assert mean_accelerators({"timeline": []}, 400.0) is None


def test_a_reused_run_gives_its_static_systems_recomputed_at_another_slo(tmp_path):
    earlier = {**_results(90, {"vanilla-x2": 100}), "args": {"seed": 16}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(earlier))
    trace = phases(args(phase_s=100.0))
    same = reused_systems(path, trace, args(seed=16, budget=None), SLO)
    assert list(same) == ["vanilla-x2"]  # the autoscaled system plans for its SLO: never reused
    assert same["vanilla-x2"]["figures"] == earlier["systems"]["vanilla-x2"]["figures"]
    tight = reused_systems(path, trace, args(seed=16, budget=None), Slo(1.0, 0.005))
    assert tight["vanilla-x2"]["figures"]["trace"]["goodput_tok_s"] == 0.0  # TPOT 10 ms > 5 ms
    assert tight["vanilla-x2"]["figures"]["trace"]["output_tok_s"] > 0
    with pytest.raises(ValueError, match="--reuse: .* another trace"):
        reused_systems(path, trace, args(seed=17, budget=None), SLO)


def test_sim_live_maps_systems_and_measures_its_inputs():
    assert static_split("routed-1+1", 2) == {"vanilla": 1, "speculative": 1}
    assert static_split("vanilla-x2", 2) == {"vanilla": 2, "speculative": 0}
    assert static_split("autoscaled", 2) is None and static_split("vllm-switch-x2", 2) is None
    results = _results(100, {"routed-1+1": 100})
    for system in results["systems"].values():
        system["step_times"] = {"vanilla": {"1": 0.01, "64": 0.05},
                                "speculative": {"1": 0.02, "64": 0.2}}
        for r in system["requests"]:
            r["route"], r["acceptance_histogram"] = "speculative", [1, 0, 0, 0, 3]
    etau = measured_etau(results)
    assert etau["code"] == pytest.approx(1 + 12 / 4) and etau["chat"] == 1.0
    assert measured_profiles(results, "autoscaled")["vanilla"] == {1: 0.01, 64: 0.05}
    # 8 requests of 100 tokens, each in 0.1 + 99 x 0.01 s = 1.09 s: within a 50 ms TPOT SLO
    assert live_goodput(results["systems"]["routed-1+1"], 0.05, 400.0) == pytest.approx(2.0)


def test_sim_verdict_compares_the_hours_at_which_each_policy_reaches_the_target():
    def run(hours, slo):
        return {"accelerator_hours": hours, "slo": slo}

    ours = [run(380, 0.97), run(500, 0.995), run(420, 0.992)]  # default first
    # between 380 h (97%) and 420 h (99.2%): 380 + 40 x 2 / 2.2
    assert hours_at(ours, 0.99) == pytest.approx(416.36, abs=0.01)
    assert hours_at([run(300, 0.991)], 0.99) == 300 and hours_at([run(300, 0.98)], 0.99) is None
    got = verdict(ours, [run(360, 0.95), run(430, 0.976), run(520, 0.991)])
    # theirs: 430 + 90 x 1.4 / 1.5 = 514 h
    assert "99% reached at: ours 416.4 h, theirs 514.0 h (19.0% fewer): met" in got
    assert "interpolated 95.74%, ours 97.00%: met" in got
    assert "theirs never does" in verdict(ours, [run(360, 0.95)])
    assert "(3.7% fewer): missed" in verdict(ours, [run(432.5, 0.99)])
    assert verdict([run(380, 0.97)], [run(360, 0.95)]).startswith("ours never reaches 99%")
