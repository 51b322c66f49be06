"""`specserve render` and `specserve cluster`: manifests from the config, and the RayService on a
Kubernetes cluster with KubeRay.

    specserve render --config manifests/configs/gpu.yaml [--kind rayjob]   YAML on stdout
    specserve render --all [--check]                  rewrite (or check) manifests/ from configs/
    specserve cluster apply --config FILE | -f FILE [--dry-run] [--force-conflicts]
    specserve cluster status [NAME]
    specserve cluster scale [NAME] --group vanilla [--replicas N] [--min N] [--max N]
    specserve cluster upgrade --config FILE [--image IMAGE] [--timeout-s 1800]
    specserve cluster submit-batch --config FILE [--input PATH] [--output PATH] [--no-follow]
    specserve cluster delete [NAME] [--kind rayjob]

Connection flags as kubectl's, before or after the verb: --kubeconfig, --context, -n/--namespace.
The config is validated and rendered before any API call; a config the cluster cannot host
(tensor_parallel_size not dividing a worker's GPUs, ...) is refused naming the field.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import yaml
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import MaxRetryError

from cluster import kube_status
from cluster.config import DEFAULT_CONFIG_PATH, ConfigError, SpecserveConfig
from cluster.kube_client import Kube, api_error, connect
from cluster.kuberay import MANIFESTS_DIR, plain, rayjob, rayservice, render, render_all

EXIT_FAILED, EXIT_USAGE = 1, 2


def _log(message: str, t0: float) -> None:
    print(f"[{time.monotonic() - t0:5.0f}s] {message}", flush=True)


def load_config(path: str, image: str | None = None) -> SpecserveConfig:
    """The config file, with `kubernetes.image` replaced when `image` is given (re-validated)."""
    cfg = SpecserveConfig.from_yaml(path)
    if image is None:
        return cfg
    data = cfg.model_dump(mode="json", exclude_unset=True)
    data.setdefault("kubernetes", {})["image"] = image
    return SpecserveConfig.from_dict(data, source=f"{path} with --image")


def cmd_render(args: argparse.Namespace) -> int:
    if not args.all:
        print(render(SpecserveConfig.from_yaml(args.config), args.config, args.kind), end="")
        return 0
    drifted = []
    for path, text in render_all().items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                drifted.append(path)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(MANIFESTS_DIR.parent)}")
    for path in drifted:
        print(f"drift: {path.relative_to(MANIFESTS_DIR.parent)} differs from its config; "
              "run `specserve render --all`", file=sys.stderr)
    return EXIT_FAILED if drifted else 0


def cmd_apply(args: argparse.Namespace, objs: list[dict], kube: Kube) -> int:
    for obj in objs:
        before = kube.get(obj["kind"], obj["metadata"]["name"])
        after = kube.apply(obj, force=args.force_conflicts, dry_run=args.dry_run)
        same = before and before["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
        verb = "unchanged" if same else "serverside-applied"
        print(f"{obj['kind'].lower()}.ray.io/{obj['metadata']['name']} {verb} "
              f"(generation {after['metadata'].get('generation')})"
              + (" (server dry run)" if args.dry_run else ""))
    return 0


def cmd_status(args: argparse.Namespace, kube: Kube) -> int:
    obj = kube.get("RayService", args.name)
    if obj is None:
        print(f"RayService {kube.namespace}/{args.name} not found", file=sys.stderr)
        return EXIT_FAILED
    print(kube_status.format_rayservice(obj))
    return 0


def _group_patch(spec_path: str, groups: list[dict], group: str, values: dict) -> list[dict]:
    index = next((i for i, g in enumerate(groups) if g.get("groupName") == group), None)
    if index is None:
        raise KeyError(group)
    base = f"{spec_path}/workerGroupSpecs/{index}"
    return [{"op": "test", "path": f"{base}/groupName", "value": group},
            *({"op": "add", "path": f"{base}/{k}", "value": v} for k, v in values.items())]


def cmd_scale(args: argparse.Namespace, kube: Kube) -> int:
    """Sets a worker group's bounds on the RayService (durable) and on its live RayClusters
    (effective now: KubeRay does not copy replica counts from a RayService to its clusters)."""
    svc = kube.get("RayService", args.name)
    if svc is None:
        print(f"RayService {kube.namespace}/{args.name} not found", file=sys.stderr)
        return EXIT_FAILED
    groups = svc["spec"]["rayClusterConfig"].get("workerGroupSpecs") or []
    current = next((g for g in groups if g.get("groupName") == args.group), None)
    if current is None:
        print(f"--group: no worker group {args.group!r} (have: "
              f"{', '.join(g.get('groupName', '?') for g in groups)})", file=sys.stderr)
        return EXIT_USAGE
    flags = {"replicas": args.replicas, "minReplicas": args.min, "maxReplicas": args.max}
    values = {k: v for k, v in flags.items() if v is not None}
    new = {k: values.get(k, current.get(k, 0)) for k in flags}
    if new["minReplicas"] > new["maxReplicas"]:
        print(f"--min: {new['minReplicas']} is above --max {new['maxReplicas']}", file=sys.stderr)
        return EXIT_USAGE
    if "replicas" in values and not new["minReplicas"] <= new["replicas"] <= new["maxReplicas"]:
        print(f"--replicas: {new['replicas']} is outside [{new['minReplicas']}, "
              f"{new['maxReplicas']}]", file=sys.stderr)
        return EXIT_USAGE
    kube.json_patch("RayService", args.name,
                    _group_patch("/spec/rayClusterConfig", groups, args.group, values))
    changed = ", ".join(f"{k} {current.get(k, '-')}->{v}" for k, v in values.items())
    print(f"rayservice.ray.io/{args.name} {args.group}: {changed}")
    status = svc.get("status") or {}
    for role in ("activeServiceStatus", "pendingServiceStatus"):
        name = (status.get(role) or {}).get("rayClusterName")
        cluster = kube.get("RayCluster", name) if name else None
        if cluster is None:
            continue
        kube.json_patch("RayCluster", name, _group_patch(
            "/spec", cluster["spec"].get("workerGroupSpecs") or [], args.group, values))
        print(f"raycluster.ray.io/{name} ({role.removesuffix('ServiceStatus')}) {args.group}: "
              f"{changed}")
    if "replicas" in values and svc["spec"]["rayClusterConfig"].get("enableInTreeAutoscaling"):
        print("note: the autoscaler owns replicas within [min, max] and may change it again")
    return 0


def cmd_upgrade(args: argparse.Namespace, obj: dict, kube: Kube) -> int:
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
    after = kube.apply(obj, force=args.force_conflicts)
    generation = after["metadata"]["generation"]
    t0 = time.monotonic()
    if generation == before["metadata"]["generation"]:
        _log(f"nothing to upgrade: generation {generation} is already applied", t0)
    else:
        _log(f"applied generation {generation}; active RayCluster {old_active or '-'}", t0)
    last, current = "", after
    for current in kube.follow("RayService", name, args.timeout_s):
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
    print(f"upgrade timed out: {kube_status.stuck_reason(current, old_active, args.timeout_s)}",
          file=sys.stderr)
    if args.on_timeout == "revert" and generation != before["metadata"]["generation"]:
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


def cmd_submit_batch(args: argparse.Namespace, cfg: SpecserveConfig, kube: Kube) -> int:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    name = args.job_name or f"{cfg.kubernetes.name}-batch-{stamp}"
    obj = plain(rayjob(cfg, name, args.input, args.output))
    kube.create(obj)
    t0 = time.monotonic()
    _log(f"rayjob.ray.io/{name} created: {obj['spec']['entrypoint']}", t0)
    if args.no_follow:
        return 0
    timeout_s = args.timeout_s or (cfg.kubernetes.batch.active_deadline_s + 60)
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


def cmd_delete(args: argparse.Namespace, kube: Kube) -> int:
    kind = {"rayservice": "RayService", "rayjob": "RayJob"}[args.kind]
    found = kube.delete(kind, args.name)
    print(f"{args.kind}.ray.io/{args.name} {'deleted' if found else 'not found'}")
    return 0 if found else EXIT_FAILED


def _connection_flags(p: argparse.ArgumentParser) -> None:
    # SUPPRESS: the flags may come before or after the verb without one erasing the other.
    p.add_argument("--kubeconfig", default=argparse.SUPPRESS,
                   help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context")
    p.add_argument("-n", "--namespace", default=argparse.SUPPRESS,
                   help="namespace (default: the context's, else default)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specserve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    top = p.add_subparsers(dest="command", required=True)
    r = top.add_parser("render", help="print or rewrite the KubeRay manifests")
    r.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config file")
    r.add_argument("--kind", choices=["rayservice", "rayjob"], default="rayservice")
    r.add_argument("--all", action="store_true", help="rewrite manifests/ from manifests/configs/")
    r.add_argument("--check", action="store_true", help="with --all: only report drift")
    c = top.add_parser("cluster", help="operate the RayService and batch RayJobs")
    _connection_flags(c)
    verbs = c.add_subparsers(dest="verb", required=True)

    def verb(name: str, helptext: str, *, config: bool = False, name_arg: bool = True):
        v = verbs.add_parser(name, help=helptext)
        _connection_flags(v)
        if name_arg:
            v.add_argument("name", nargs="?", default="specserve", help="RayService name")
        if config:
            v.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config file")
        return v

    a = verb("apply", "server-side apply the RayService rendered from a config", config=True,
             name_arg=False)
    a.add_argument("-f", "--filename", action="append", help="apply this manifest file instead")
    a.add_argument("--dry-run", action="store_true", help="server-side dry run (validates)")
    a.add_argument("--force-conflicts", action="store_true",
                   help="take over fields another manager (e.g. `scale`) set")
    verb("status", "conditions, clusters and Serve apps of a RayService")
    s = verb("scale", "set a worker group's replicas / min / max")
    s.add_argument("--group", required=True, help="worker group (vanilla, speculative)")
    s.add_argument("--replicas", type=int, help="pods now (the autoscaler may change it)")
    s.add_argument("--min", type=int, help="minReplicas")
    s.add_argument("--max", type=int, help="maxReplicas")
    u = verb("upgrade", "apply a new image or config and watch the new cluster take over",
             config=True, name_arg=False)
    u.add_argument("--image", help="new image for every Ray container (tag carries rayVersion)")
    u.add_argument("--timeout-s", type=float, default=1800, help="give up after this many seconds")
    u.add_argument("--on-timeout", choices=["revert", "keep"], default="revert",
                   help="revert: re-apply the previous spec (drops the pending cluster); keep: "
                   "leave KubeRay trying")
    u.add_argument("--force-conflicts", action="store_true", help="as for apply")
    b = verb("submit-batch", "create a batch RayJob and follow it", config=True, name_arg=False)
    b.add_argument("--input", help="input JSONL path on the data volume")
    b.add_argument("--output", help="output JSONL path on the data volume")
    b.add_argument("--job-name", help="RayJob name (default: <name>-batch-<UTC time>)")
    b.add_argument("--no-follow", action="store_true", help="return once created")
    b.add_argument("--timeout-s", type=float, help="stop following after this many seconds")
    d = verb("delete", "delete the RayService (or a RayJob)")
    d.add_argument("--kind", choices=["rayservice", "rayjob"], default="rayservice")
    return p


def _prepare(args: argparse.Namespace) -> tuple[list[dict], SpecserveConfig | None]:
    """Everything that can be checked without the API: config, rendering, manifest files."""
    if args.verb == "apply" and args.filename:
        return [d for f in args.filename for d in yaml.safe_load_all(Path(f).read_text()) if d], None
    if args.verb in ("apply", "upgrade", "submit-batch"):
        cfg = load_config(args.config, getattr(args, "image", None))
        return ([] if args.verb == "submit-batch" else [plain(rayservice(cfg))]), cfg
    return [], None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "render":
            return cmd_render(args)
        objs, cfg = _prepare(args)
    except ConfigError as e:
        print(f"specserve: invalid config:\n{e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"specserve: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        kube = connect(getattr(args, "kubeconfig", None), getattr(args, "context", None),
                       getattr(args, "namespace", None))
    except (ConfigException, OSError) as e:
        print(f"specserve: no cluster credentials: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.verb == "apply":
            return cmd_apply(args, objs, kube)
        if args.verb == "upgrade":
            return cmd_upgrade(args, objs[0], kube)
        if args.verb == "submit-batch":
            return cmd_submit_batch(args, cfg, kube)
        return {"status": cmd_status, "scale": cmd_scale, "delete": cmd_delete}[args.verb](
            args, kube)
    except ApiException as e:
        message = api_error(e)
        hint = ("\nanother field manager (e.g. `specserve cluster scale`) set these fields: "
                "update the config, or pass --force-conflicts") if "Apply failed" in message else ""
        print(f"specserve: API server: {message}{hint}", file=sys.stderr)
        return EXIT_FAILED
    except MaxRetryError as e:
        print(f"specserve: cannot reach the API server: {e.reason}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
