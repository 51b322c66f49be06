"""What a Kubernetes user needs to watch specserve: scrape configs, alert rules and the dashboard,
rendered into manifests/observability/ by `specserve render --all` (drift-checked by its `--check`
and by tests/unit/test_observability.py).

For the Prometheus Operator (kube-prometheus-stack), as KubeRay's Prometheus guide sets it up:
- `pod-monitor.ray-head.yaml`: the head pod's Ray metrics export (port `metrics`: Serve's proxy
  and controller, the autoscaling policy's series) and the ingress's `GET /metrics` through
  Serve's proxy (port `serve`: the `specserve_*` series);
- `pod-monitor.ray-workers.yaml`: each worker pod's Ray metrics export (the pools' replicas:
  `ray_vllm_*`);
- `prometheus-rule.yaml`: the alert rules (alerts.py) as a PrometheusRule;
- `grafana-dashboard.configmap.yaml`: the dashboard for Grafana's dashboard sidecar.
And, for a Prometheus and Grafana without the operator: `specserve-rules.yaml` (a rule file,
`promtool check rules` clean) and `specserve-dashboard.json` (Grafana → Dashboards → Import).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cluster.commented_yaml import Default, Doc, dump
from cluster.observability.alerts import rule_groups
from cluster.observability.dashboard import dashboard_json

OUT_DIR = "observability"
DASHBOARD_FILE = "specserve-dashboard.json"
RULES_FILE = "specserve-rules.yaml"
_LABELS = {"app.kubernetes.io/name": "specserve", "app.kubernetes.io/component": "observability"}
_PROMETHEUS_RELEASE = Doc("kube-prometheus-stack selects monitors and rules by its Helm release "
                          "label: set it to yours.", "prometheus")


def _metadata(name: str, labels: dict, namespace: str) -> Doc:
    return Doc(f"Namespace from kubectl's -n or the context: {namespace}.", {
        "name": name, "labels": Doc("Selects everything specserve renders, and the label the "
                                    "consumer selects by.", {**_LABELS, **labels})})


def _operator_metadata(name: str) -> Doc:
    return _metadata(name, {"release": _PROMETHEUS_RELEASE}, "the RayService's")


def _relabelings() -> Doc:
    return Doc("Keep the RayCluster's name on every series (as KubeRay's guide does).", [
        {"sourceLabels": ["__meta_kubernetes_pod_label_ray_io_cluster"],
         "targetLabel": "ray_io_cluster"}])


def pod_monitor(node_type: str) -> dict:
    """The PodMonitor of the Ray `head` or `worker` pods of the namespace."""
    endpoints = [{"port": Doc("Ray's metrics export (`ray start --metrics-export-port`, 8080 "
                              "in KubeRay).", "metrics"),
                  "interval": Doc("Ray's agent refreshes its export every 10 s.", "15s"),
                  "relabelings": _relabelings()}]
    if node_type == "head":
        endpoints.append({
            "port": Doc("Serve's HTTP port: `GET /metrics` reaches the specserve ingress (one "
                        "replica; each scrape would see one of several).", "serve"),
            "path": "/metrics",
            "interval": "15s",
            "authorization": Default("With server.api_keys_env set, /metrics needs a key: a "
                                     "Secret holding one of the API keys.",
                                     {"type": "Bearer", "credentials": {
                                         "name": "specserve-metrics-key", "key": "key"}}),
            "relabelings": _relabelings()})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _operator_metadata(f"specserve-ray-{node_type}"),
        "spec": {
            "jobLabel": Doc("The `job` label of the series: this pod label's value.",
                            "ray.io/node-type"),
            "selector": Doc(f"Every Ray {node_type} pod of the namespace (KubeRay's labels); add "
                            "ray.io/cluster to single out one RayCluster.",
                            {"matchLabels": {"ray.io/node-type": node_type,
                                             "ray.io/is-ray-node": "yes"}}),
            "podMetricsEndpoints": Doc("The ports to scrape.", endpoints),
        },
    }


def prometheus_rule() -> dict:
    """The alert rules as a PrometheusRule."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": _operator_metadata("specserve-alerts"),
            "spec": Doc("The rule groups of specserve-rules.yaml "
                        "(cluster/observability/alerts.py).", rule_groups())}


def dashboard_configmap() -> dict:
    """The dashboard as a ConfigMap for Grafana's sidecar (label `grafana_dashboard: "1"`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata("specserve-dashboard", {
                "grafana_dashboard": Doc("kube-prometheus-stack's Grafana sidecar loads "
                                         "ConfigMaps with this label.", "1")},
                "Grafana's, or any its sidecar watches (sidecar.dashboards.searchNamespace)"),
            "data": Doc("One dashboard (cluster/observability/dashboard.py).",
                        {DASHBOARD_FILE: dashboard_json()})}


def rules_file() -> str:
    """The alert rules as a Prometheus rule file."""
    return ("# specserve alert rules, rendered by `specserve render --all` "
            "(cluster/observability/alerts.py).\n"
            "# Plain Prometheus: list this file under `rule_files:`. `promtool check rules` "
            "passes.\n" + yaml.safe_dump(rule_groups(), sort_keys=False, allow_unicode=True,
                                          width=float("inf")))


def render_all(out_dir: Path) -> dict[Path, str]:
    """{path under out_dir/observability: text} of every observability file."""
    d = out_dir / OUT_DIR
    header = ("specserve {what}, rendered by `specserve render --all` (cluster/observability/)."
              "\n{needs}")
    operator = "Needs the Prometheus Operator's CRDs (kube-prometheus-stack)."
    return {
        d / "pod-monitor.ray-head.yaml": dump(pod_monitor("head"), header.format(
            what="PodMonitor of the Ray head pods", needs=operator)),
        d / "pod-monitor.ray-workers.yaml": dump(pod_monitor("worker"), header.format(
            what="PodMonitor of the Ray worker pods", needs=operator)),
        d / "prometheus-rule.yaml": dump(prometheus_rule(), header.format(
            what="alert rules", needs=operator)),
        d / "grafana-dashboard.configmap.yaml": dump(dashboard_configmap(), header.format(
            what="Grafana dashboard", needs="For Grafana's dashboard sidecar "
            "(kube-prometheus-stack's Grafana has it).")),
        d / RULES_FILE: rules_file(),
        d / DASHBOARD_FILE: dashboard_json(),
    }
