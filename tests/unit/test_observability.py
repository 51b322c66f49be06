"""The dashboard, its manifests and the panel catalog without an application (under a second):
committed files match what the code renders, the dashboard carries every catalog panel, every
panel's PromQL parses (promtool), and the PodMonitors scrape ports the RayService's pods name.
Every query on live series: tests/e2e/test_observability_live.py."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from cluster.kube.render import MANIFESTS_DIR
from cluster.observability.dashboard import UID, dashboard_json
from cluster.observability.manifests import DASHBOARD_FILE, OUT_DIR, render_all
from cluster.observability.panels import ROWS, evaluable, panels
from tests.prometheus import binary, missing

OBS_DIR = MANIFESTS_DIR / OUT_DIR


def _load(name: str) -> dict:
    return yaml.safe_load((OBS_DIR / name).read_text())


def test_committed_files_match_what_the_code_renders():
    rendered = render_all(MANIFESTS_DIR)
    assert {p.name for p in rendered} == {p.name for p in OBS_DIR.iterdir()}, \
        "run `specserve render --all`"
    for path, text in rendered.items():
        assert path.read_text() == text, f"{path.name} drifted: run `specserve render --all`"


def test_dashboard_carries_every_catalog_panel_in_rows():
    board = json.loads(dashboard_json())
    assert board["uid"] == UID
    rows = [p for p in board["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows] == [r.title for r in ROWS]
    shown = [p for p in board["panels"] if p["type"] == "timeseries"]
    assert [(p["title"], [(t["expr"], t["legendFormat"]) for t in p["targets"]]) for p in shown] \
        == [(p.title, [(q.expr, q.legend) for q in p.queries]) for p in panels()]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in shown)
    cells = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]]
    assert len(set(cells)) == len(cells), "panels overlap"
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "task"}


def test_catalog_keys_are_unique_and_main_panels_exist():
    keys = [p.key for p in panels()]
    assert len(set(keys)) == len(keys)
    assert sum(p.main for p in panels()) >= 2


@pytest.mark.skipif(missing("promtool") is not None, reason=missing("promtool") or "")
def test_every_panel_query_parses(tmp_path):
    """promtool parses each expression as a recording rule (syntax and function names)."""
    rules = [{"record": f"panel:{p.key}:{i}", "expr": evaluable(q.expr)}
             for p in panels() for i, q in enumerate(p.queries)]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = subprocess.run([str(binary("promtool")), "check", "rules", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_configmap_holds_the_dashboard_for_grafanas_sidecar():
    cm = _load("grafana-dashboard.configmap.yaml")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"][DASHBOARD_FILE] == (OBS_DIR / DASHBOARD_FILE).read_text()


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_pod_monitors_scrape_ports_the_pods_name(variant):
    service = yaml.safe_load((MANIFESTS_DIR / f"ray-service.{variant}.yaml").read_text())
    cluster = service["spec"]["rayClusterConfig"]
    groups = {"head": [cluster["headGroupSpec"]], "worker": cluster["workerGroupSpecs"]}
    for node_type, file in (("head", "pod-monitor.ray-head.yaml"),
                            ("worker", "pod-monitor.ray-workers.yaml")):
        monitor = _load(file)
        assert monitor["spec"]["selector"]["matchLabels"]["ray.io/node-type"] == node_type
        for group in groups[node_type]:
            ports = {p["name"] for c in group["template"]["spec"]["containers"]
                     for p in c.get("ports", [])}
            for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                assert endpoint["port"] in ports, (file, group.get("groupName", "head"), ports)


def test_prometheus_rule_carries_the_rule_file():
    rule = _load("prometheus-rule.yaml")
    groups = yaml.safe_load((OBS_DIR / "specserve-rules.yaml").read_text())["groups"]
    assert rule["kind"] == "PrometheusRule" and rule["spec"]["groups"] == groups
