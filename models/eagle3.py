"""EAGLE-3 head (Li et al. 2025, arXiv:2503.01840) over the lab's target, in vLLM 0.32's layout.

The module mirrors vLLM's `llama_eagle3.LlamaModel` with one decoder layer, so trained weights mean
the same thing at inference:

    g      = fc(aux_2 ‖ aux_4 ‖ aux_6)                  # fused target features [.., H], step 0 only
    x      = input_layernorm(embed(token)) ‖ hidden_norm(g)      # [.., 2H]
    r      = g + o_proj(attn(q,k,v from x))                      # residual = un-normed g
    r      = r + mlp(post_attention_layernorm(r))
    logits = lm_head(norm(r));  the next step's g = r (pre-norm, vLLM's `aux_output`)

EAGLE 3.1 (`v31=True`; arXiv 2605.09992, vLLM PR #42764, read in the installed
`llama_eagle3.py`: config flags `fc_norm` and `norm_output`) changes two things: each fused aux
layer gets its own RMSNorm before `fc` (`fc_norm.{i}`), and the next step's g is the *post*-norm
state norm(r), against the attention drift of deeper drafts over long contexts.

embed is the target's own embedding (the export leaves `embed_tokens` out, so vLLM shares the
target's). Training-time test: step j at anchor i reads token x[i+j+1] at position i+j, attends to
the step-0 keys of anchors <= i (the draft's KV cache of verified tokens) plus its own keys of steps
1..j at anchor i, and learns the target's distribution at position i+j+1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import (LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding,
                                                      apply_rotary_pos_emb)


class _Attention(nn.Module):
    """q/k/v over the layer input (2H for EAGLE-3, H for EAGLE-1), o back to H; checkpoint names."""

    def __init__(self, cfg: LlamaConfig, in_features: int) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.hidden_size // cfg.num_attention_heads
        self.q_proj = nn.Linear(in_features, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(in_features, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(in_features, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)


class _MidLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.self_attn = _Attention(cfg, 2 * h)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(h, eps)
        self.hidden_norm = LlamaRMSNorm(h, eps)
        self.post_attention_layernorm = LlamaRMSNorm(h, eps)


class Eagle3Head(nn.Module):
    """One-layer EAGLE-3 drafter (EAGLE 3.1 with `v31`); `embed` is the frozen target embedding
    (not a parameter)."""

    fc_norm: nn.ModuleList | None = None  # EAGLE 3.1: one RMSNorm per fused aux layer before fc
    norm_output = False  # EAGLE 3.1: the next draft step reads the post-norm hidden state

    def __init__(self, target: LlamaForCausalLM, aux_layer_ids: tuple[int, ...], seed: int,
                 v31: bool = False) -> None:
        super().__init__()
        cfg = target.config
        torch.manual_seed(seed)
        h = cfg.hidden_size
        self.cfg, self.aux_layer_ids = cfg, tuple(aux_layer_ids)
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = h // cfg.num_attention_heads
        self.fc = nn.Linear(len(aux_layer_ids) * h, h, bias=False)
        self.midlayer = _MidLayer(cfg)
        self.norm = LlamaRMSNorm(h, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(h, cfg.vocab_size, bias=False)
        if v31:  # RMSNorm weights start at 1: no draw from the seeded generator
            self.fc_norm = nn.ModuleList(LlamaRMSNorm(h, cfg.rms_norm_eps) for _ in aux_layer_ids)
            self.norm_output = True
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=cfg.initializer_range)
        # Start from the target's own reading of its last fused layer: fc passes that layer through
        # (identity block), norm and lm_head are the target's.
        last = max(range(len(aux_layer_ids)), key=lambda i: aux_layer_ids[i])
        self.fc.weight.data[:, last * h:(last + 1) * h] += torch.eye(h)
        self.lm_head.weight.data.copy_(target.lm_head.weight.data)
        self.norm.weight.data.copy_(target.model.norm.weight.data)
        self.register_buffer("embed", target.model.embed_tokens.weight.detach().clone(),
                             persistent=False)
        self.rotary = LlamaRotaryEmbedding(cfg)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """x [B, T, 2H], positions int64 [B, T] -> q, k, v [B, heads, T, d] with RoPE."""
        b, t, _ = x.shape
        attn = self.midlayer.self_attn
        q = attn.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary(x, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        rep = self.n_heads // self.n_kv
        return q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    def unrolled(self, aux: torch.Tensor, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time test: logits [B, T, V] of each of `steps` unrolled steps.

        Args:
            aux: the target's features named by `feature`: aux layer outputs [B, T, n_aux * H].
            ids: the sequence int64 [B, T]; step j at anchor i reads ids[i + j + 1] (0 past the end).
            steps: unrolled steps (>= 1).

        Step j's logits at anchor i predict ids[i + j + 2]; anchors with i + j + 2 > T - 1 are
        garbage and must be masked by the caller.
        """
        b, t = ids.shape
        mid = self.midlayer
        g = self._first_hidden(aux)  # [B, T, H]
        anchors = torch.arange(t).expand(b, t)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        k0 = v0 = None
        diag_k, diag_v, out = [], [], []
        scale = 1.0 / math.sqrt(self.head_dim)
        for j in range(steps):
            tok = F.pad(ids[:, j + 1:], (0, j + 1))  # [B, T]
            x, g = self._layer_input(F.embedding(tok, self.embed), g)
            q, k, v = self._qkv(x, anchors + j)
            if j == 0:
                k0, v0 = k, v
                ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                diag_k.append(k)
                diag_v.append(v)
                s0 = (q @ k0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
                sd = torch.stack([(q * kk).sum(-1) * scale for kk in diag_k], -1)  # [B, h, T, j]
                p = torch.softmax(torch.cat([s0, sd], -1), dim=-1)
                ctx = p[..., :t] @ v0 + (p[..., t:, None] * torch.stack(diag_v, -2)).sum(-2)
            r = g + mid.self_attn.o_proj(ctx.transpose(1, 2).reshape(b, t, -1))
            r = r + mid.mlp(mid.post_attention_layernorm(r))
            out.append(self._readout(r))
            g = self.norm(r) if self.norm_output else r
        return out

    # The three places EAGLE-3 and EAGLE-1 differ (see models.eagle1).
    feature = "aux"  # which HeadData field `unrolled` reads

    def _first_hidden(self, features: torch.Tensor) -> torch.Tensor:
        """Step 0's hidden state from the target's features: fc over the fused aux layers (each
        normed first in EAGLE 3.1)."""
        if self.fc_norm is not None:
            chunks = features.chunk(len(self.fc_norm), -1)
            features = torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks)], -1)
        return self.fc(features)

    def _layer_input(self, emb: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention input [.., 2H], residual [.., H]) from token embeddings and hidden state."""
        mid = self.midlayer
        return torch.cat([mid.input_layernorm(emb), mid.hidden_norm(g)], -1), g

    def _readout(self, r: torch.Tensor) -> torch.Tensor:
        """Logits [.., V] from the layer output (pre-norm residual stream)."""
        return self.lm_head(self.norm(r))

    def export(self, out: Path, target_config: LlamaConfig) -> None:
        """Writes `config.json` + `model.safetensors` in the layout vLLM 0.32's
        `LlamaForCausalLMEagle3` loads (full draft vocab: no `d2t`, no `embed_tokens`; EAGLE 3.1:
        `fc_norm.{i}.weight` and the flags `fc_norm`, `norm_output`)."""
        out.mkdir(parents=True, exist_ok=True)
        cfg = target_config.to_dict()
        cfg.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                   draft_vocab_size=target_config.vocab_size,
                   target_hidden_size=target_config.hidden_size,
                   eagle_config={"eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids),
                                 "use_aux_hidden_state": True})
        if self.norm_output:  # read by vLLM's llama_eagle3 with getattr(config, ...)
            cfg.update(fc_norm=True, norm_output=True)
        cfg.pop("transformers_version", None)
        (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        tensors = {n: p.detach().contiguous().clone() for n, p in self.named_parameters()}
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
