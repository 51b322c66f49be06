"""The few Kubernetes API calls `specserve cluster` makes, on the official `kubernetes` client.

KubeRay objects are custom objects (`ray.io/v1`): server-side apply is a PATCH with content type
`application/apply-patch+yaml` and a field manager; JSON patches need
`application/json-patch+json` (a list body).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

GROUP, VERSION = "ray.io", "v1"
PLURALS = {"RayService": "rayservices", "RayJob": "rayjobs", "RayCluster": "rayclusters"}
FIELD_MANAGER = "specserve"
SCALE_FIELD_MANAGER = "specserve-scale"
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
WATCH_CHUNK_S = 30


@dataclass(frozen=True, slots=True)
class Kube:
    """A namespace of one cluster, through the custom objects API."""

    api: client.CustomObjectsApi
    namespace: str

    def _args(self, kind: str) -> tuple[str, str, str, str]:
        return GROUP, VERSION, self.namespace, PLURALS[kind]

    def get(self, kind: str, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        try:
            return self.api.get_namespaced_custom_object(*self._args(kind), name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def apply(self, obj: dict, *, force: bool = False, dry_run: bool = False,
              field_manager: str = FIELD_MANAGER) -> dict:
        """Server-side apply: creates or updates the fields this manager owns; idempotent."""
        return _body(self.api.patch_namespaced_custom_object(
            *self._args(obj["kind"]), obj["metadata"]["name"], obj,
            field_manager=field_manager, force=force, dry_run="All" if dry_run else None,
            _content_type="application/apply-patch+yaml", _preload_content=False))

    def create(self, obj: dict) -> dict:
        return _body(self.api.create_namespaced_custom_object(
            *self._args(obj["kind"]), obj, field_manager=FIELD_MANAGER, _preload_content=False))

    def json_patch(self, kind: str, name: str, ops: list[dict],
                   field_manager: str = SCALE_FIELD_MANAGER) -> dict:
        """RFC 6902 patch; a failed `test` op makes the server refuse the whole patch (422)."""
        return self.api.patch_namespaced_custom_object(
            *self._args(kind), name, ops, field_manager=field_manager,
            _content_type="application/json-patch+json")

    def delete(self, kind: str, name: str) -> bool:
        """Deletes the object (its RayClusters go with it, by owner reference, as with
        kubectl's default background propagation); False when it does not exist."""
        try:
            self.api.delete_namespaced_custom_object(*self._args(kind), name)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def follow(self, kind: str, name: str, timeout_s: float) -> Iterator[dict | None]:
        """The object now, then each change until `timeout_s` passes; None once it is deleted.

        A watch from the last seen resourceVersion, restarted every WATCH_CHUNK_S seconds and
        after a 410 Gone (history compacted), so no change between chunks is missed.
        """
        deadline = time.monotonic() + timeout_s
        obj = self.get(kind, name)
        yield obj
        if obj is None:
            return
        version = obj["metadata"]["resourceVersion"]
        watcher = watch.Watch()
        while (left := deadline - time.monotonic()) > 0:
            try:
                for event in watcher.stream(
                        self.api.list_namespaced_custom_object, *self._args(kind),
                        field_selector=f"metadata.name={name}", resource_version=version,
                        timeout_seconds=max(1, int(min(left, WATCH_CHUNK_S)))):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "DELETED":
                        yield None
                        return
                    yield obj
                    if time.monotonic() >= deadline:
                        return
            except ApiException as e:  # Watch raises the ERROR events it does not retry itself
                if e.status != 410:
                    raise
                obj = self.get(kind, name)  # history gone: resync from a fresh read
                yield obj
                if obj is None:
                    return
                version = obj["metadata"]["resourceVersion"]


def _body(response) -> dict:
    """The JSON body of a raw response: the generated client maps only 200 to a body, so an
    apply that creates (201) would come back as None. Errors still raise ApiException."""
    return json.loads(response.data)


def connect(kubeconfig: str | None = None, context: str | None = None,
            namespace: str | None = None) -> Kube:
    """Loads credentials like kubectl: `--kubeconfig`, else $KUBECONFIG, else ~/.kube/config, else
    the in-cluster service account. Namespace: `-n`, else the context's, else `default`."""
    conf = client.Configuration()
    # Read $KUBECONFIG now: the client's own default was fixed when it was imported.
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        config.load_kube_config(config_file=path, context=context, client_configuration=conf)
        contexts, current = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), current) if context \
            else current
        namespace = namespace or (chosen or {}).get("context", {}).get("namespace")
    except (ConfigException, OSError) as e:
        if kubeconfig or context or "KUBERNETES_SERVICE_HOST" not in os.environ:
            pod = "" if kubeconfig or context else " (and not running in a pod)"
            raise ConfigException(f"kubeconfig {path}: {e}{pod}") from e
        config.load_incluster_config(client_configuration=conf)
        if not namespace and SA_NAMESPACE.is_file():
            namespace = SA_NAMESPACE.read_text().strip()
    return Kube(client.CustomObjectsApi(client.ApiClient(conf)), namespace or "default")


def api_error(e: ApiException) -> str:
    """The API server's own message (Status.message) when there is one."""
    try:
        message = json.loads(e.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{e.status} {e.reason}: {message or e.body or ''}".rstrip(": ")
