"""The alert rules (cluster/observability/alerts.py) with a real `promtool`: the rendered rule file
passes `promtool check rules`, and `promtool test rules` shows each alert firing on its scenario,
with its summary rendered, and staying silent on a healthy one (synthetic series, no application;
under a second). The same rules on live series: tests/e2e/test_observability_live.py."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from cluster.kube.render import MANIFESTS_DIR
from cluster.observability.alerts import ALERTS
from cluster.observability.manifests import RULES_FILE, rules_file
from tests.prometheus import binary, missing

pytestmark = pytest.mark.skipif(missing("promtool") is not None,
                                reason=missing("promtool") or "")
DESCRIPTION = {a.name: a.description for a in ALERTS}


def _promtool(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary("promtool")), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def _alert(name: str, labels: dict, summary: str) -> dict:
    return {"exp_labels": labels,
            "exp_annotations": {"summary": summary, "description": DESCRIPTION[name]}}


# Each scenario: input series (one sample a minute) and, at `eval_time`, the alerts expected:
# firing on the degraded series, absent on the healthy ones next to them.
SCENARIOS = {
    "SpecserveAcceptanceDrift": {
        # code: E[τ] 3.0 for 6 h, then 1.5 for an hour; math stays at 3.0.
        "series": {'specserve_mean_acceptance_length{task="code",temperature="t0",'
                   'context="short"}': "3+0x360 1.5+0x60",
                   'specserve_mean_acceptance_length{task="math",temperature="t0",'
                   'context="short"}': "3+0x420"},
        "eval_time": "7h",
        "alerts": [({"task": "code", "temperature": "t0", "context": "short"},
                    "Acceptance of code requests at t0 (short context) fell to 0.50 accepted "
                    "tokens per step, below 70% of its 6 h average")],
    },
    "SpecserveEngineAcceptanceDrift": {
        # 3 of 4 draft tokens accepted for 6 h, then 1 of 4.
        "series": {'specserve_spec_decode_num_accepted_tokens_total{pool="speculative"}':
                   "0+3x360 1080+1x60",
                   'specserve_spec_decode_num_draft_tokens_total{pool="speculative"}': "0+4x420"},
        "eval_time": "7h",
        "alerts": [({"pool": "speculative"}, "The speculative pool's acceptance rate fell to "
                    "25%, below 70% of its 6 h average")],
    },
    "SpecserveSpeculativeSlowerThanPredicted": {
        # TPOT 10 ms vanilla, 12.5 ms speculative (S = 0.8) while the router predicts S = 2.
        "series": {
            'ray_vllm_request_time_per_output_token_seconds_sum{deployment="vanilla"}':
                "0+0.6x60",
            'ray_vllm_request_time_per_output_token_seconds_count{deployment="vanilla"}':
                "0+60x60",
            'ray_vllm_request_time_per_output_token_seconds_sum{deployment="speculative"}':
                "0+0.75x60",
            'ray_vllm_request_time_per_output_token_seconds_count{deployment="speculative"}':
                "0+60x60",
            'specserve_expected_speedup_sum{route="speculative",task="code"}': "0+120x60",
            'specserve_expected_speedup_count{route="speculative",task="code"}': "0+60x60"},
        "eval_time": "45m",
        "alerts": [({}, "Speculation realizes a speedup of 0.80, below 80% of what the router "
                    "predicts")],
    },
    "SpecserveSustained429": {
        # 10 of 50 requests a minute refused.
        "series": {'specserve_requests_total{route="speculative",reason="rejected_overload",'
                   'task="code"}': "0+10x40",
                   'specserve_requests_total{route="vanilla",reason="low_load",task="chat"}':
                   "0+40x40"},
        "eval_time": "30m",
        "alerts": [({}, "20% of requests get 429 (both pools full)")],
    },
    "SpecservePoolWithoutLiveReplica": {
        # The speculative pool's replica turns unhealthy at 5 min; vanilla's stays.
        "series": {'ray_serve_deployment_replica_healthy{deployment="speculative",replica="a"}':
                   "1x5 0x20",
                   'ray_serve_deployment_replica_healthy{deployment="vanilla",replica="b"}':
                   "1x25"},
        "eval_time": "10m",
        "alerts": [({"deployment": "speculative"}, "The speculative pool has no healthy replica")],
    },
}
# The same alerts on healthy input: nothing fires.
HEALTHY = {
    "SpecserveEngineAcceptanceDrift": {
        'specserve_spec_decode_num_accepted_tokens_total{pool="speculative"}': "0+3x420",
        'specserve_spec_decode_num_draft_tokens_total{pool="speculative"}': "0+4x420"},
    "SpecserveSpeculativeSlowerThanPredicted": {
        'ray_vllm_request_time_per_output_token_seconds_sum{deployment="vanilla"}': "0+0.6x60",
        'ray_vllm_request_time_per_output_token_seconds_count{deployment="vanilla"}': "0+60x60",
        'ray_vllm_request_time_per_output_token_seconds_sum{deployment="speculative"}':
            "0+0.3x60",
        'ray_vllm_request_time_per_output_token_seconds_count{deployment="speculative"}':
            "0+60x60",
        'specserve_expected_speedup_sum{route="speculative",task="code"}': "0+120x60",
        'specserve_expected_speedup_count{route="speculative",task="code"}': "0+60x60"},
    "SpecserveSustained429": {
        'specserve_requests_total{route="speculative",reason="rejected_overload",task="code"}':
            "0+1x40",
        'specserve_requests_total{route="vanilla",reason="low_load",task="chat"}': "0+100x40"},
}


def test_rule_file_passes_promtool_check(tmp_path):
    committed = MANIFESTS_DIR / "observability" / RULES_FILE
    assert committed.read_text() == rules_file(), "run `specserve render --all`"
    result = _promtool("check", "rules", str(committed))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_every_alert_has_a_scenario():
    assert set(SCENARIOS) == {a.name for a in ALERTS}


def test_each_alert_fires_on_its_scenario_and_not_when_healthy(tmp_path):
    (tmp_path / RULES_FILE).write_text(rules_file())
    tests = []
    for name, s in SCENARIOS.items():
        severity = next(a.severity for a in ALERTS if a.name == name)
        tests.append({
            "interval": "1m",
            "input_series": [{"series": k, "values": v} for k, v in s["series"].items()],
            "alert_rule_test": [{"eval_time": s["eval_time"], "alertname": name, "exp_alerts": [
                _alert(name, {**labels, "severity": severity}, summary)
                for labels, summary in s["alerts"]]}]})
    for name, series in HEALTHY.items():
        tests.append({
            "interval": "1m",
            "input_series": [{"series": k, "values": v} for k, v in series.items()],
            "alert_rule_test": [{"eval_time": SCENARIOS[name]["eval_time"], "alertname": name,
                                 "exp_alerts": []}]})
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(
        {"rule_files": [RULES_FILE], "evaluation_interval": "1m", "tests": tests},
        sort_keys=False, allow_unicode=True))
    result = _promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
