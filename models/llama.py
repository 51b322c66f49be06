"""Llama shapes of the target and the draft, their configs, parameter counts and FLOPs.

Both are plain `LlamaForCausalLM` (untied embeddings, RoPE, SwiGLU, RMSNorm), so vLLM loads them
with no custom code.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from models.params import LlamaShape


def llama_config(shape: LlamaShape, tokenizer: PreTrainedTokenizerFast,
                 max_position_embeddings: int = 1024) -> LlamaConfig:
    """`LlamaConfig` for `shape` whose vocab and special ids come from `tokenizer` (float32)."""
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads, intermediate_size=shape.intermediate_size,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=False,
        rms_norm_eps=1e-5, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, dtype="float32", architectures=["LlamaForCausalLM"])


def new_llama(config: LlamaConfig, seed: int) -> LlamaForCausalLM:
    """Freshly initialised model; the same (config, seed) gives bit-identical weights."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Only ids: vLLM turns sampling fields found here into default sampling parameters.
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id)
    return model


def param_counts(config: LlamaConfig) -> dict[str, int]:
    """Parameter counts by role: embedding [V, H], lm_head [V, H], body (layers + final norm)."""
    h, v, i, n = config.hidden_size, config.vocab_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h  # q,o + k,v + gate,up,down + 2 norms
    body = n * per_layer + h
    embedding = lm_head = v * h
    return {"embedding": embedding, "lm_head": lm_head, "body": body,
            "total": embedding + lm_head + body}


def flops_per_token(config: LlamaConfig) -> int:
    """Forward FLOPs per token excluding attention scores: 2 * (body + lm_head params).

    The embedding lookup is a gather (no FLOPs); attention scores add 4 * L * H * context per token,
    which this count leaves out (small at the short contexts used here).
    """
    counts = param_counts(config)
    return 2 * (counts["body"] + counts["lm_head"])
