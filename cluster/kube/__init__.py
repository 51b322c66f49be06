"""specserve on Kubernetes with KubeRay: the RayService and RayJob rendered from the config
(render.py, pods.py), the API client (client.py), status readers (status.py), rollouts and batch
jobs followed to their end (rollout.py), and `specserve render` / `specserve cluster` (cli.py).
"""

from cluster.kube.cli import main
from cluster.kube.client import Kube, api_error, connect
from cluster.kube.render import MANIFESTS_DIR, check_fit, rayjob, rayservice, render, render_all
from cluster.kube.rollout import run_batch, upgrade
from cluster.kube.status import format_rayservice

__all__ = ["MANIFESTS_DIR", "Kube", "api_error", "check_fit", "connect", "format_rayservice",
           "main", "rayjob", "rayservice", "render", "render_all", "run_batch", "upgrade"]
