"""Operating specserve with Prometheus and Grafana: the dashboard's panel catalog (panels.py), the
Grafana dashboard built from it (dashboard.py), the alert rules (alerts.py), their Kubernetes
manifests (manifests.py, written by `specserve render --all`) and PNG renders (png.py)."""
