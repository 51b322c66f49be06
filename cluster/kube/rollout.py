"""Changes that take a while, watched to the end: an upgrade of the RayService (a new RayCluster
takes over) and a batch RayJob. Progress goes to stdout as `[  12s] ...` lines.
"""

from __future__ import annotations

import sys
import time

from cluster.kube import status as kube_status
from cluster.kube.client import Kube

EXIT_FAILED = 1


def _log(message: str, t0: float) -> None:
    print(f"[{time.monotonic() - t0:5.0f}s] {message}", flush=True)


def upgrade(kube: Kube, obj: dict, *, timeout_s: float, on_timeout: str = "revert",
            force: bool = False) -> int:
    """Applies the new spec and watches until the new cluster serves; on timeout, says why and
    (by default) re-applies the previous spec so KubeRay drops the pending cluster. The active
    cluster is never patched."""
    name = obj["metadata"]["name"]
    before = kube.get("RayService", name)
    if before is None:
        print(f"RayService {kube.namespace}/{name} not found: `specserve cluster apply` first",
              file=sys.stderr)
        return EXIT_FAILED
    old_active = ((before.get("status") or {}).get("activeServiceStatus") or {}).get(
        "rayClusterName")
    after = kube.apply(obj, force=force)
    generation = after["metadata"]["generation"]
    t0 = time.monotonic()
    if generation == before["metadata"]["generation"]:
        _log(f"nothing to upgrade: generation {generation} is already applied", t0)
    else:
        _log(f"applied generation {generation}; active RayCluster {old_active or '-'}", t0)
    last, current = "", after
    for current in kube.follow("RayService", name, timeout_s):
        if current is None:
            _log(f"RayService {name} was deleted", t0)
            return EXIT_FAILED
        verdict = kube_status.upgrade_verdict(current, old_active, generation)
        if verdict.detail != last:
            _log(verdict.detail, t0)
            last = verdict.detail
        if verdict.done:
            return 0
    current = kube.get("RayService", name) or current
    print(f"upgrade timed out: {kube_status.stuck_reason(current, old_active, timeout_s)}",
          file=sys.stderr)
    if on_timeout == "revert" and generation != before["metadata"]["generation"]:
        previous = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                    "metadata": {"name": name, "labels": before["metadata"].get("labels", {})},
                    "spec": before["spec"]}
        reverted = kube.apply(previous, force=True)
        print(f"reverted RayService {name} to the spec of generation "
              f"{before['metadata']['generation']} (now generation "
              f"{reverted['metadata']['generation']}); KubeRay drops the pending cluster, the "
              f"active RayCluster {old_active or '-'} was not touched", file=sys.stderr)
    else:
        print("left as is: KubeRay keeps trying the pending cluster; the active one still serves",
              file=sys.stderr)
    return EXIT_FAILED


def run_batch(kube: Kube, obj: dict, *, timeout_s: float, follow: bool = True) -> int:
    """Creates the RayJob and follows it until KubeRay marks it Complete or Failed."""
    name = obj["metadata"]["name"]
    kube.create(obj)
    t0 = time.monotonic()
    _log(f"rayjob.ray.io/{name} created: {obj['spec']['entrypoint']}", t0)
    if not follow:
        return 0
    last = ""
    for current in kube.follow("RayJob", name, timeout_s):
        if current is None:
            _log(f"rayjob {name} was deleted", t0)
            return EXIT_FAILED
        verdict = kube_status.rayjob_verdict(current)
        if verdict.detail != last:
            _log(verdict.detail, t0)
            last = verdict.detail
        if verdict.done:
            return 0 if verdict.ok else EXIT_FAILED
    print(f"rayjob {name} still running after {timeout_s:.0f} s (it goes on; "
          f"`kubectl get rayjob {name}`)", file=sys.stderr)
    return EXIT_FAILED
