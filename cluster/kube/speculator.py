"""A speculator rollout on KubeRay: the canary override goes through the RayService.

KubeRay owns a RayService's Serve applications: it applies `spec.serveConfigV2` to the active
RayCluster and re-applies it whenever the CR changes, so an override put straight into Serve
(deployments/rollout.py `apply`) would be undone at the CR's next change. `RayServiceOverride`
puts it into `serveConfigV2` instead: the application's `deployments:` entry for the speculative
pool gets `ray_actor_options` with `core.rollout.CANARY_ENV` (or loses the entry on a roll-back to
the config's speculator). Only `serveConfigV2` changes, so KubeRay updates the applications in
place on the active cluster (no new RayCluster: its cluster hash covers `rayClusterConfig` only).

The patch is a JSON patch under the field manager `specserve-rollout` with a `test` of the
previous `serveConfigV2` (a concurrent change makes the API server refuse it: 422). A later
`specserve cluster apply` of the unchanged config conflicts with it (409, naming that manager),
as after `specserve cluster scale`: name the candidate in the config
(`speculative.speculator.model`), or apply with `--force-conflicts` to drop the override.
"""

from __future__ import annotations

import argparse

import yaml
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from cluster.kube.client import Kube, api_error, connect
from deployments.rollout import RolloutError, current_actor_options, with_canary

ROLLOUT_FIELD_MANAGER = "specserve-rollout"


def override_serve_config(serve_config: str, app_name: str, actor_options: dict,
                          value: str | None) -> str:
    """`serveConfigV2` (YAML text) with application `app_name`'s speculative deployment
    overridden to `actor_options` + `CANARY_ENV` = `value` (None: the override removed).

    Raises:
        RolloutError: no application `app_name` in it.
    """
    doc = yaml.safe_load(serve_config) or {}
    apps = doc.get("applications") or []
    names = [a.get("name") for a in apps]
    if app_name not in names:
        raise RolloutError(f"--app: the RayService's serveConfigV2 has no application "
                           f"{app_name!r} (have {names})")
    doc["applications"] = [with_canary(a, actor_options, value) if a.get("name") == app_name
                           else a for a in apps]
    return yaml.safe_dump(doc, sort_keys=False, width=100)


class RayServiceOverride:
    """A `deployments.rollout.Applier` that puts the override into RayService `name`'s
    `serveConfigV2` (module docstring); KubeRay applies it to the running cluster.

    Args:
        kube: the namespace the RayService is in.
        name: the RayService.
        app_name: the Serve application (`--app`).
        actor_options: the speculative deployment's effective `ray_actor_options` without the
            override (default: read from the running cluster's Serve, which needs `ray.init`).
    """

    def __init__(self, kube: Kube, name: str, app_name: str, actor_options: dict | None = None):
        self.kube, self.name, self.app_name = kube, name, app_name
        self._actor_options = actor_options

    def serve_config(self) -> str:
        """The RayService's `serveConfigV2` now.

        Raises:
            RolloutError: no such RayService, or it has no serveConfigV2.
        """
        obj = self.kube.get("RayService", self.name)
        if obj is None:
            raise RolloutError(f"--rayservice: no RayService {self.kube.namespace}/{self.name}")
        text = (obj.get("spec") or {}).get("serveConfigV2")
        if not text:
            raise RolloutError(f"--rayservice: {self.kube.namespace}/{self.name} has no "
                               "spec.serveConfigV2")
        return text

    def __call__(self, value: str | None) -> None:
        old = self.serve_config()
        options = self._actor_options
        if options is None:
            options, _ = current_actor_options(self.app_name)
        new = override_serve_config(old, self.app_name, options, value)
        try:
            self.kube.json_patch("RayService", self.name, [
                {"op": "test", "path": "/spec/serveConfigV2", "value": old},
                {"op": "replace", "path": "/spec/serveConfigV2", "value": new}],
                field_manager=ROLLOUT_FIELD_MANAGER)
        except ApiException as e:
            raise RolloutError(f"--rayservice {self.kube.namespace}/{self.name}: "
                               f"{api_error(e)}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`--rayservice` and the kubectl-like connection flags of `specserve cluster`."""
    p.add_argument("--rayservice", default=None, help="on KubeRay: the RayService serving the "
                   "application; the override goes into its serveConfigV2 (else straight to "
                   "Serve, which KubeRay would undo)")
    p.add_argument("--kubeconfig", default=None, help="with --rayservice: kubeconfig file, "
                   "else $KUBECONFIG, ~/.kube/config, in-cluster")
    p.add_argument("--context", default=None, help="with --rayservice: kubeconfig context")
    p.add_argument("-n", "--namespace", default=None, help="with --rayservice: namespace, else "
                   "the context's, else default")


def applier_from_args(args: argparse.Namespace) -> RayServiceOverride | None:
    """The applier `--rayservice` asks for (None without it: straight to Serve).

    Raises:
        RolloutError: the kubeconfig cannot be read, or the RayService is not there.
    """
    if not args.rayservice:
        return None
    try:
        kube = connect(args.kubeconfig, args.context, args.namespace)
    except (ConfigException, OSError) as e:
        raise RolloutError(f"--kubeconfig: {e}") from None
    override = RayServiceOverride(kube, args.rayservice, args.app)
    try:
        override.serve_config()  # there, before anything else is touched
    except ApiException as e:
        raise RolloutError(f"--rayservice {kube.namespace}/{args.rayservice}: "
                           f"{api_error(e)}") from None
    return override
