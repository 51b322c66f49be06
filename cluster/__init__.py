"""Cluster operation: the `specserve` command line (cli.py), offline batch jobs (batch/), the
RayService and RayJob on Kubernetes with KubeRay (kube/), dashboards and alert rules
(observability/), the commented-YAML writer their manifests share (commented_yaml.py) and the
reaper of orphaned vLLM engines (engine_reaper.py).

Imports run one way: core <- router <- deployments, autoscaling <- cluster; nothing below imports
`cluster`.
"""

__all__ = ["batch", "cli", "commented_yaml", "engine_reaper", "kube", "observability"]
