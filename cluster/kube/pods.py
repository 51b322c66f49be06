"""Pod templates of the head and the worker groups (rendered into the RayService and the RayJob).

Every container sets requests = limits (Guaranteed QoS: a GPU pod is never evicted for memory
pressure it did not cause), names its ports, mounts the models volume read-only and points
`SPECSERVE_MODELS_DIR` at it, so `${models}` in the config resolves on every pod.
"""

from __future__ import annotations

from cluster.commented_yaml import Doc
from core import MODELS_DIR_ENV, RAY_NODE_ENV, KubeConfig, WorkerGroupConfig

STAMP_ANNOTATION = "specserve.io/serve-config-hash"
GPU_RESOURCE = "nvidia.com/gpu"


def _resources(cpus: float, memory_gib: float, gpus: int = 0) -> dict:
    amounts = {"cpu": f"{cpus:g}", "memory": f"{memory_gib:g}Gi"}
    if gpus:
        amounts[GPU_RESOURCE] = gpus
    return {"requests": Doc("Requests equal limits: Guaranteed QoS.", dict(amounts)),
            "limits": Doc("Ray reads its CPU, GPU and memory counts from these.", dict(amounts))}


def _port(name: str, port: int) -> dict:
    return {"name": name, "containerPort": port}


def key_envs(cfg) -> dict[str, str]:
    """The API-key variables of `cfg.server` and the key of each in `kubernetes.api_keys_secret`:
    {variable: key}, inference keys then admin keys."""
    server, kube = cfg.server, cfg.kubernetes
    out = {}
    if server.api_keys_env:
        out[server.api_keys_env] = kube.api_keys_secret_key
    if server.admin_api_keys_env:
        out[server.admin_api_keys_env] = kube.admin_api_keys_secret_key
    return out


def _env(kube: KubeConfig, keys: dict[str, str]) -> Doc:
    env = [{"name": MODELS_DIR_ENV, "value": kube.models_mount_path}]
    env += [{"name": k, "value": v} for k, v in RAY_NODE_ENV.items()]
    doc = ("`${models}` in model paths expands to this folder. A dead Ray worker's process group "
           "is killed with it (no orphaned vLLM engine holding memory).")
    for name, key in keys.items():
        env.append({"name": name, "valueFrom": Doc(
            f"The {'admin' if key == kube.admin_api_keys_secret_key else 'API'} keys "
            "(comma-separated), never inline: only the ingress reads them.",
            {"secretKeyRef": Doc("Secret and key holding them.", {
                "name": kube.api_keys_secret, "key": key})})})
    return Doc(doc, env)


def _container(kube: KubeConfig, name: str, resources: dict, ports: list, mounts: list,
               keys: dict[str, str]) -> dict:
    return {
        "name": Doc("KubeRay finds the Ray container by position (first).", name),
        "image": Doc("Ray + specserve + vLLM; its tag carries rayVersion.", kube.image),
        "env": _env(kube, keys),
        "ports": Doc("Named ports; KubeRay's Services refer to them by name.", ports),
        "resources": Doc("Requests and limits, always both.", resources),
        "volumeMounts": Doc("Models (read-only) and anything the pod needs locally.", mounts),
    }


def _models_volume(kube: KubeConfig) -> tuple[dict, dict]:
    mount = {"name": "models", "mountPath": kube.models_mount_path, "readOnly": True}
    volume = {"name": "models", "persistentVolumeClaim": {"claimName": kube.models_pvc,
                                                          "readOnly": True}}
    return mount, volume


def _template(containers: list, volumes: list, stamp: str | None,
              extra: dict | None = None) -> dict:
    spec = {"containers": Doc("The Ray container.", containers),
            "volumes": Doc("Volumes the containers mount.", volumes), **(extra or {})}
    template: dict = {}
    if stamp:
        template["metadata"] = Doc(
            "Hash of serveConfigV2: a Serve config change changes the cluster spec, so KubeRay "
            "rolls it out on a new cluster instead of in place on the active one.",
            {"annotations": {STAMP_ANNOTATION: stamp}})
    template["spec"] = Doc("Pod spec of this group.", spec)
    return template


def head_spec(cfg, *, batch: bool = False, stamp: str | None = None) -> dict:
    """`headGroupSpec`: no replicas on the head (`num-cpus: "0"`), the Serve port named `serve`."""
    kube = cfg.kubernetes
    mount, volume = _models_volume(kube)
    mounts, volumes = [mount], [volume]
    if batch:
        mounts.append({"name": "data", "mountPath": "/data"})
        volumes.append({"name": "data",
                        "persistentVolumeClaim": {"claimName": kube.batch.data_pvc}})
    ports = [_port("gcs-server", 6379), _port("dashboard", 8265), _port("client", 10001),
             _port("serve", cfg.server.port), _port("metrics", 8080)]
    container = _container(kube, "ray-head", _resources(kube.head.cpus, kube.head.memory_gib),
                           ports, mounts, key_envs(cfg))
    spec = {}
    if cfg.server.node_labels:
        spec["labels"] = Doc("Ray node labels of the head: the router selects them "
                             "(server.node_labels), so losing a worker pod never takes it.",
                             _ray_labels(cfg.server.node_labels, "server.node_labels"))
    return spec | {
        "rayStartParams": Doc("`ray start` flags of the head.", {
            "num-cpus": Doc("No Serve replica or task is scheduled on the head.", "0"),
            "dashboard-host": Doc("KubeRay reaches the dashboard from outside the pod.", "0.0.0.0"),
        }),
        "template": Doc("The head pod.", _template([container], volumes, stamp)),
    }


def _ray_labels(labels: dict[str, str], who: str) -> dict:
    """A group's `labels` (KubeRay >= 1.5: its pods' Ray node labels, `ray start --labels`),
    one comment above each: what selects it."""
    return {key: Doc(f"Selected by {who}.", value) for key, value in labels.items()}


def worker_group(kube: KubeConfig, name: str, group: WorkerGroupConfig, gpu: bool, *,
                 replicas: int, serve_port: int, stamp: str | None = None,
                 keys: dict[str, str], labels: dict[str, str] | None = None) -> dict:
    """One `workerGroupSpecs` entry: pods sized for `group.gpus / tensor_parallel_size` replicas,
    with the Ray node `labels` its pool's replicas select (`<pool>.node_labels`)."""
    mount, volume = _models_volume(kube)
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{group.shm_gib:g}Gi"}}
    container = _container(kube, "ray-worker", _resources(group.cpus, group.memory_gib, group.gpus),
                           [_port("serve", serve_port), _port("metrics", 8080)],
                           [mount, {"name": "dshm", "mountPath": "/dev/shm"}], keys)
    extra = {}
    if gpu:
        extra["tolerations"] = Doc("GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule.",
                                   [{"key": GPU_RESOURCE, "operator": "Exists",
                                     "effect": "NoSchedule"}])
    what = f"{group.gpus} GPUs" if gpu else f"{group.cpus:g} CPUs"
    spec = {
        "groupName": Doc(f"The {name} pool's pods ({what} each).", name),
        "replicas": Doc("Pods at creation: enough for the pool's num_replicas; the autoscaler "
                        "owns it afterwards.", replicas),
        "minReplicas": Doc("Fewest pods the autoscaler keeps.", group.min_replicas),
        "maxReplicas": Doc("Most pods the autoscaler starts.", group.max_replicas),
    }
    if labels:
        spec["labels"] = Doc(f"Ray node labels of these pods: only the {name} pool's replicas "
                             f"select them, so its replicas run here and nowhere else "
                             f"({name}.node_labels).", _ray_labels(labels, f"{name}.node_labels"))
    return spec | {
        "rayStartParams": Doc("`ray start` flags; CPU, GPU and memory come from the limits.", {}),
        "template": Doc(f"A {name} worker pod.", _template([container], [volume, shm], stamp,
                                                           extra)),
    }
