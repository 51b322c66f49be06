"""`specserve render` and `specserve cluster`: manifests from the config, and the RayService on a
Kubernetes cluster with KubeRay.

    specserve render --config manifests/configs/gpu.yaml [--kind rayjob]   YAML on stdout
    specserve render --all [--check]                  rewrite (or check) manifests/ from configs/,
                                                      and manifests/observability/
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
from pathlib import Path

import yaml
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import MaxRetryError

from cluster.kube.status import format_rayservice
from core import DEFAULT_CONFIG_PATH, ConfigError, SpecserveConfig, load_config
from cluster.kube.client import Kube, api_error, connect
from cluster.kube.rollout import run_batch, upgrade
from cluster.kube.render import MANIFESTS_DIR, plain, rayjob, rayservice, render, render_all

EXIT_FAILED, EXIT_USAGE = 1, 2


def _cmd_render(args: argparse.Namespace) -> int:
    if not args.all:
        print(render(load_config(args.config, check=False), args.config, args.kind), end="")
        return 0
    # The dashboard needs the `observability` extra (grafana-foundation-sdk): for --all only.
    from cluster.observability.manifests import render_all as render_observability

    files = render_all(Path(args.out))
    files.update({path: (text, "cluster/observability/")
                  for path, text in render_observability(Path(args.out)).items()})
    drifted = 0
    for path, (text, source) in files.items():
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
        elif not path.is_file() or path.read_text() != text:
            print(f"drift: {path} differs from {source}; run `specserve render --all`",
                  file=sys.stderr)
            drifted += 1
    return EXIT_FAILED if drifted else 0


def _cmd_apply(args: argparse.Namespace, objs: list[dict], kube: Kube) -> int:
    for obj in objs:
        before = kube.get(obj["kind"], obj["metadata"]["name"])
        after = kube.apply(obj, force=args.force_conflicts, dry_run=args.dry_run)
        # Compare content, not resourceVersion: a 1.20 API server rewrites managedFields' time
        # (a new resourceVersion) on a no-op apply made in a later second.
        same = before is not None and before.get("spec") == after.get("spec") and \
            before["metadata"].get("labels") == after["metadata"].get("labels")
        verb = "unchanged" if same else "serverside-applied"
        print(f"{obj['kind'].lower()}.ray.io/{obj['metadata']['name']} {verb} "
              f"(generation {after['metadata'].get('generation')})"
              + (" (server dry run)" if args.dry_run else ""))
    return 0


def _cmd_status(args: argparse.Namespace, kube: Kube) -> int:
    obj = kube.get("RayService", args.name)
    if obj is None:
        print(f"RayService {kube.namespace}/{args.name} not found", file=sys.stderr)
        return EXIT_FAILED
    print(format_rayservice(obj))
    return 0


def _group_patch(spec_path: str, groups: list[dict], group: str, values: dict) -> list[dict]:
    """JSON patch setting `values` on worker group `group`, refused if the list moved meanwhile."""
    index = next(i for i, g in enumerate(groups) if g.get("groupName") == group)
    base = f"{spec_path}/workerGroupSpecs/{index}"
    return [{"op": "test", "path": f"{base}/groupName", "value": group},
            *({"op": "add", "path": f"{base}/{k}", "value": v} for k, v in values.items())]


def _scale_error(current: dict, values: dict) -> str | None:
    """Why these values cannot be set on a group whose spec is `current`, or None."""
    if not values:
        return "give --replicas, --min or --max"
    if any(v < 0 for v in values.values()):
        return "replica counts must be >= 0"
    new = {"replicas": 0, "minReplicas": 0, "maxReplicas": 2**31 - 1, **current, **values}
    if new["minReplicas"] > new["maxReplicas"]:
        return f"--min: {new['minReplicas']} is above --max {new['maxReplicas']}"
    if "replicas" in values and not new["minReplicas"] <= new["replicas"] <= new["maxReplicas"]:
        return (f"--replicas: {new['replicas']} is outside [{new['minReplicas']}, "
                f"{new['maxReplicas']}]")
    return None


def _cmd_scale(args: argparse.Namespace, kube: Kube) -> int:
    """Sets a worker group's counts on the RayService (durable) and on its live RayClusters
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
    counts = {k: current[k] for k in flags if k in current}
    if error := _scale_error(counts, values):
        print(error, file=sys.stderr)
        return EXIT_USAGE
    kube.json_patch("RayService", args.name,
                    _group_patch("/spec/rayClusterConfig", groups, args.group, values))
    changed = ", ".join(f"{k} {current.get(k, '-')}->{v}" for k, v in values.items())
    print(f"rayservice.ray.io/{args.name} {args.group}: {changed}")
    status = svc.get("status") or {}
    for role in ("active", "pending"):
        name = (status.get(f"{role}ServiceStatus") or {}).get("rayClusterName")
        cluster = kube.get("RayCluster", name) if name else None
        live = (cluster or {}).get("spec", {}).get("workerGroupSpecs") or []
        if not any(g.get("groupName") == args.group for g in live):
            continue
        kube.json_patch("RayCluster", name, _group_patch("/spec", live, args.group, values))
        print(f"raycluster.ray.io/{name} ({role}) {args.group}: {changed}")
    if "replicas" in values and svc["spec"]["rayClusterConfig"].get("enableInTreeAutoscaling"):
        print("note: the autoscaler owns replicas within [min, max] and may change it again")
    return 0


def _cmd_submit_batch(args: argparse.Namespace, cfg: SpecserveConfig, kube: Kube) -> int:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    name = args.job_name or f"{cfg.kubernetes.name}-batch-{stamp}"
    return run_batch(kube, plain(rayjob(cfg, name, args.input, args.output)),
                     timeout_s=args.timeout_s or cfg.kubernetes.batch.active_deadline_s + 60,
                     follow=not args.no_follow)


def _cmd_delete(args: argparse.Namespace, kube: Kube) -> int:
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
    r.add_argument("--out", default=str(MANIFESTS_DIR), help="with --all: manifests folder")
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
        docs = [d for f in args.filename for d in yaml.safe_load_all(Path(f).read_text())]
        return [d for d in docs if d], None
    if args.verb in ("apply", "upgrade", "submit-batch"):
        cfg = load_config(args.config, image=getattr(args, "image", None), check=False)
        return ([] if args.verb == "submit-batch" else [plain(rayservice(cfg))]), cfg
    return [], None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "render":
            return _cmd_render(args)
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
            return _cmd_apply(args, objs, kube)
        if args.verb == "upgrade":
            return upgrade(kube, objs[0], timeout_s=args.timeout_s, on_timeout=args.on_timeout,
                           force=args.force_conflicts)
        if args.verb == "submit-batch":
            return _cmd_submit_batch(args, cfg, kube)
        return {"status": _cmd_status, "scale": _cmd_scale, "delete": _cmd_delete}[args.verb](
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
