"""EAGLE-1 head (Li et al. 2024, arXiv:2401.15077) over the lab's target, in vLLM 0.32's layout.

Mirrors vLLM's `llama_eagle.LlamaModel` with one decoder layer whose input RMSNorm is dropped:

    x      = fc(embed(token) ‖ g)            # g: the target's final post-norm hidden state (step 0)
    r      = x + o_proj(attn(q,k,v from x))
    r      = r + mlp(post_attention_layernorm(r))
    logits = lm_head(r)                      # the target's lm_head, no final norm; next g = r

embed and lm_head are the target's (shared by vLLM, absent from the export). Training-time test as
for EAGLE-3 (`models.eagle3.Eagle3Head.unrolled`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from models.eagle3 import Eagle3Head, _Attention


class _Layer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.self_attn = _Attention(cfg, cfg.hidden_size)
        self.mlp = LlamaMLP(cfg)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Eagle1Head(Eagle3Head):
    """One-layer EAGLE-1 drafter; embed and lm_head are the frozen target's (buffers)."""

    feature = "final"

    def __init__(self, target: LlamaForCausalLM, seed: int) -> None:
        nn.Module.__init__(self)
        cfg = target.config
        torch.manual_seed(seed)
        h = cfg.hidden_size
        self.cfg, self.aux_layer_ids = cfg, ()
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = h // cfg.num_attention_heads
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.midlayer = _Layer(cfg)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=cfg.initializer_range)
        self.fc.weight.data[:, h:] += torch.eye(h)  # x starts as the target's hidden state
        self.register_buffer("embed", target.model.embed_tokens.weight.detach().clone(),
                             persistent=False)
        self.register_buffer("lm_weight", target.lm_head.weight.detach().clone(), persistent=False)
        self.rotary = LlamaRotaryEmbedding(cfg)

    def _first_hidden(self, features: torch.Tensor) -> torch.Tensor:
        return features

    def _layer_input(self, emb: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.fc(torch.cat([emb, g], -1))
        return x, x

    def _readout(self, r: torch.Tensor) -> torch.Tensor:
        return F.linear(r, self.lm_weight)

    def export(self, out: Path, target_config: LlamaConfig) -> None:
        """Writes `config.json` + `model.safetensors` as vLLM 0.32's `EagleLlamaForCausalLM` loads
        them (`layers.0.*` without input_layernorm, `fc` [H, 2H]; embed and lm_head shared)."""
        out.mkdir(parents=True, exist_ok=True)
        cfg = target_config.to_dict()
        cfg.update(architectures=["EagleLlamaForCausalLM"], num_hidden_layers=1)
        cfg.pop("transformers_version", None)
        (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        tensors = {n.replace("midlayer.", "layers.0."): p.detach().contiguous().clone()
                   for n, p in self.named_parameters()}
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
