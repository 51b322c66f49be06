"""`run_app`: deploys the specserve application on a running Serve instance, with its autoscaler.

Ray Serve 2.60 takes an application-level `autoscaling_policy` (one policy sizing several
deployments) only from a declarative config (`ServeDeploySchema`: `serve deploy`, the REST API, a
RayService's `serveConfigV2`); `serve.run` has no such argument. So the application is applied as
a config whose `import_path` is `deployments.app:build_app` and, with `autoscaling.enabled`, whose
`autoscaling_policy` is `autoscaling.controller.PoolAutoscaler`. Declarative with or without it:
so a deployment's options can later be updated in place, with the same code version (no rebuild),
which `specserve speculator rollout` does (deployments/rollout.py), as on a RayService.
Other declaratively deployed applications on the instance are kept (a declarative apply replaces
the whole set).
"""

from __future__ import annotations

import time

from ray import serve
from ray.serve.schema import ServeDeploySchema

from core import SpecserveConfig
from core.ray_private import get_global_client
from deployments.app import check_fits_node


def app_config(cfg: SpecserveConfig, name: str, route_prefix: str = "/") -> dict:
    """The application's entry in a Serve config, `autoscaling_policy` included when enabled."""
    entry = {"name": name, "route_prefix": route_prefix,
             "import_path": "deployments.app:build_app", "args": cfg.model_dump(mode="json")}
    if cfg.autoscaling.enabled:
        entry["autoscaling_policy"] = cfg.autoscaling_policy()
    return entry


def run_app(cfg: SpecserveConfig, name: str, route_prefix: str = "/",
            timeout_s: float = 900.0) -> None:
    """Deploys the application and waits until it is RUNNING (after `serve.start`).

    Raises:
        RuntimeError: the application failed to deploy (Serve's message).
        TimeoutError: not RUNNING within `timeout_s`.
    """
    check_fits_node(cfg)  # here too: the build task's ConfigError would reach us as a traceback
    client = get_global_client()
    details = client.get_serve_details()
    others = [app["deployed_app_config"]
              for app_name, app in details.get("applications", {}).items()
              if app_name != name and app.get("source") == "declarative"
              and app.get("deployed_app_config")]
    client.deploy_apps(ServeDeploySchema(
        http_options={"host": cfg.server.host, "port": cfg.server.port},
        applications=[*others, app_config(cfg, name, route_prefix)]))
    wait_running(name, timeout_s)


def wait_running(name: str, timeout_s: float) -> None:
    """Polls `serve.status()` until application `name` is RUNNING.

    Raises:
        RuntimeError: DEPLOY_FAILED or UNHEALTHY, with Serve's message.
        TimeoutError: still deploying after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        app = serve.status().applications.get(name)
        if app is not None and app.status == "RUNNING":
            return
        if app is not None and app.status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RuntimeError(f"application {name!r} {app.status}: {app.message}")
        time.sleep(1.0)
    raise TimeoutError(f"application {name!r} not RUNNING after {timeout_s:.0f} s")
