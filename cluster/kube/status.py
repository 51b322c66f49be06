"""Reading KubeRay status: the `specserve cluster status` table and the upgrade/batch verdicts.

Pure functions of the objects the API server returns (plain dicts), so they are tested directly.
Field names follow KubeRay v1.7.0 (`ray.io/v1`): RayService `status.conditions` (`Ready`,
`UpgradeInProgress`), `status.{active,pending}ServiceStatus.{rayClusterName, rayClusterStatus,
applicationStatuses}`; RayJob `status.{jobDeploymentStatus, jobStatus, reason, message}`.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

APP_RUNNING = "RUNNING"
JOB_FINAL = ("Complete", "Failed")


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a watched change is finished, and what to tell the operator."""

    done: bool
    detail: str
    ok: bool = True


def condition(obj: dict, kind: str) -> dict:
    """The status condition of type `kind`, or {}."""
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == kind),
                {})


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns, two spaces apart, like kubectl."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [headers, *rows])


def _workers(cluster_status: dict) -> str:
    ready = cluster_status.get("readyWorkerReplicas", 0)
    return f"{ready}/{cluster_status.get('desiredWorkerReplicas', 0)}"


def _cluster_rows(role: str, svc: dict) -> list[list[str]]:
    name = svc.get("rayClusterName")
    if not name:
        return []
    cstat = svc.get("rayClusterStatus") or {}
    head = [role, name, cstat.get("state") or "-", _workers(cstat)]
    blank = [""] * len(head)
    rows = []
    apps = svc.get("applicationStatuses") or {}
    if not apps:
        return [head + ["-", "-", "", "", ""]]
    for app, astat in sorted(apps.items()):
        deps = sorted((astat.get("serveDeploymentStatuses") or {}).items()) or [("-", {})]
        for i, (dep, dstat) in enumerate(deps):
            app_cols = [app, astat.get("status", "-")] if i == 0 else ["", ""]
            message = dstat.get("message") or (astat.get("message", "") if i == 0 else "")
            rows.append((head if not rows else blank) + app_cols +
                        [dep, dstat.get("status", "-"), message])
    return rows


def placement_rows(obj: dict) -> list[list[str]]:
    """Which group each pool (and the router) runs on: a group whose Ray node `labels` carry
    every label the pool selects (`<pool>.node_labels` in serveConfigV2's args); a pool that
    selects none may run on any group with room."""
    spec = obj.get("spec") or {}
    cluster = spec.get("rayClusterConfig") or {}
    try:
        apps = (yaml.safe_load(spec.get("serveConfigV2") or "") or {}).get("applications") or []
    except yaml.YAMLError:
        apps = []
    args = (apps[0].get("args") or {}) if apps else {}
    selects = {name: (args.get(part) or {}).get("node_labels") or {}
               for name, part in (("vanilla", "vanilla"), ("speculative", "speculative"),
                                  ("router", "server"))}
    groups = [("head", cluster.get("headGroupSpec") or {}),
              *((g.get("groupName", "?"), g) for g in cluster.get("workerGroupSpecs") or [])]
    rows = []
    for name, group in groups:
        labels = group.get("labels") or {}
        here = [p for p, want in selects.items() if want and want.items() <= labels.items()]
        anywhere = [p for p, want in selects.items() if not want]
        rows.append([name, ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-",
                     ", ".join(here + [f"{p} (any group)" for p in anywhere]) or "-"])
    return rows


def format_rayservice(obj: dict) -> str:
    """The human-readable `status` of a RayService: conditions, then clusters and Serve apps."""
    meta, status = obj.get("metadata", {}), obj.get("status") or {}
    ready = condition(obj, "Ready")
    state = "Ready" if ready.get("status") == "True" else "Not ready"
    lines = [f"RayService {meta.get('namespace', '')}/{meta.get('name', '')}: {state}, "
             f"{status.get('numServeEndpoints', 0)} serve endpoint(s), generation "
             f"{meta.get('generation', '?')} "
             f"(observed {status.get('observedGeneration', '-')})", ""]
    conds = [[c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", "")]
             for c in status.get("conditions") or []]
    lines += [table(["CONDITION", "STATUS", "REASON", "MESSAGE"], conds) if conds
              else "(no conditions yet: is the KubeRay operator running?)", ""]
    rows = (_cluster_rows("active", status.get("activeServiceStatus") or {}) +
            _cluster_rows("pending", status.get("pendingServiceStatus") or {}))
    headers = ["CLUSTER", "RAYCLUSTER", "STATE", "WORKERS", "APP", "APP STATUS", "DEPLOYMENT",
               "STATUS", "MESSAGE"]
    lines.append(table(headers, rows) if rows else "(no RayCluster yet)")
    placement = placement_rows(obj)
    if placement:
        lines += ["", table(["GROUP", "RAY NODE LABELS", "RUNS"], placement)]
    return "\n".join(lines)


def _not_running(svc: dict) -> list[str]:
    out = []
    for app, astat in sorted((svc.get("applicationStatuses") or {}).items()):
        if astat.get("status") != APP_RUNNING:
            out.append(f"app {app} {astat.get('status', 'absent')}"
                       + (f" ({astat['message']})" if astat.get("message") else ""))
        for dep, dstat in sorted((astat.get("serveDeploymentStatuses") or {}).items()):
            if dstat.get("status") != "HEALTHY":
                out.append(f"deployment {dep} {dstat.get('status', '?')}"
                           + (f": {dstat['message']}" if dstat.get("message") else ""))
    return out


def _serving(svc: dict) -> bool:
    apps = svc.get("applicationStatuses") or {}
    return bool(apps) and all(a.get("status") == APP_RUNNING for a in apps.values())


def _describe_cluster(svc: dict) -> str:
    """One line: a cluster's state, ready workers and whatever is not running yet."""
    cstat = svc.get("rayClusterStatus") or {}
    parts = [f"state {cstat.get('state') or 'not ready'}", f"workers {_workers(cstat)} ready"]
    problems = _not_running(svc)
    if not problems and not _serving(svc):
        problems = ["no Serve application reported yet"]
    return ", ".join(parts + problems)


def upgrade_verdict(obj: dict, old_active: str | None, generation: int) -> Verdict:
    """Is the upgrade to `generation` finished? Done when KubeRay observed it, no cluster is
    pending, Ready is True and every app runs; the detail says which cluster serves."""
    status = obj.get("status") or {}
    observed = status.get("observedGeneration") or 0
    if observed < generation:
        return Verdict(False, f"KubeRay has not observed generation {generation} yet "
                              f"(observed {observed or 'none'})")
    active = status.get("activeServiceStatus") or {}
    pending = status.get("pendingServiceStatus") or {}
    if pending.get("rayClusterName"):
        return Verdict(False, f"pending RayCluster {pending['rayClusterName']}: "
                              f"{_describe_cluster(pending)}")
    name = active.get("rayClusterName")
    if not name:
        return Verdict(False, "no active RayCluster yet")
    if condition(obj, "Ready").get("status") != "True" or not _serving(active):
        return Verdict(False, f"active RayCluster {name}: {_describe_cluster(active)}")
    how = "new RayCluster" if old_active and name != old_active else "RayCluster"
    return Verdict(True, f"{how} {name} serves generation {generation}")


def stuck_reason(obj: dict, old_active: str | None, waited_s: float) -> str:
    """Why an upgrade did not finish, for the timeout message."""
    status = obj.get("status") or {}
    pending = status.get("pendingServiceStatus") or {}
    active = (status.get("activeServiceStatus") or {}).get("rayClusterName")
    if pending.get("rayClusterName"):
        why = (f"pending RayCluster {pending['rayClusterName']} did not become ready in "
               f"{waited_s:.0f} s: {_describe_cluster(pending)}")
    else:
        why = f"no new RayCluster serves after {waited_s:.0f} s: " + upgrade_verdict(
            obj, old_active, 0).detail
    upgrading = condition(obj, "UpgradeInProgress")
    if upgrading.get("message"):
        why += f"; UpgradeInProgress: {upgrading['message']}"
    if active and active == old_active:
        why += f"; the active RayCluster {active} still serves the previous version"
    return why


def rayjob_verdict(obj: dict) -> Verdict:
    """Done once KubeRay marks the job Complete or Failed; ok only when the Ray job SUCCEEDED."""
    status = obj.get("status") or {}
    deploy, job = status.get("jobDeploymentStatus") or "New", status.get("jobStatus") or "-"
    detail = f"deployment {deploy}, job {job}"
    if status.get("reason") or status.get("message"):
        detail += f" ({': '.join(x for x in (status.get('reason'), status.get('message')) if x)})"
    if deploy in JOB_FINAL:
        return Verdict(True, detail, ok=deploy == "Complete" and job == "SUCCEEDED")
    return Verdict(False, detail)
