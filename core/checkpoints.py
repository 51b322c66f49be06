"""What vLLM 0.32 checks about the checkpoints at engine start, checked before any replica starts.

Each check reads a local checkpoint's config.json and is skipped when the checkpoint is not on this
machine (a path that may be the cluster's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.paths import read_config_value, resolve_path
from core.types import ConfigError

if TYPE_CHECKING:
    from core.config import SpecserveConfig


def _checkpoint_context(model_path: str) -> int | None:
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
    target_len = _checkpoint_context(cfg.model.path)
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
        draft_len = _checkpoint_context(spec.model)
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
