"""Medusa-1 heads (Cai et al. 2024, arXiv:2401.10774) on the frozen target, in vLLM 0.32's layout.

Head k (0-based) reads the target's final post-norm hidden state h_t (what vLLM's Medusa proposer
receives) and predicts the token k + 2 positions ahead (the target's own lm_head gives k + 1):

    logits_k = lm_heads[k](h + SiLU(blocks[k].layers[0](h)))      # vLLM ResidualBlock, no bias

The residual linear starts at zero and each lm_head as a copy of the target's, so an untrained head
k repeats the target's next-token guess.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaForCausalLM


class _Block(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden, bias=False)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + F.silu(layer(x))
        return x


class MedusaHeads(nn.Module):
    """`num_heads` residual-block + lm_head heads; parameter names match the checkpoint."""

    def __init__(self, target: LlamaForCausalLM, num_heads: int) -> None:
        super().__init__()
        h, v = target.config.hidden_size, target.config.vocab_size
        self.blocks = nn.ModuleList([_Block(h) for _ in range(num_heads)])
        self.lm_heads = nn.ModuleList([nn.Linear(h, v, bias=False) for _ in range(num_heads)])
        for block, head in zip(self.blocks, self.lm_heads):
            nn.init.zeros_(block.layers[0].weight)
            head.weight.data.copy_(target.lm_head.weight.data)

    def forward(self, final: torch.Tensor) -> list[torch.Tensor]:
        """final hidden states [B, T, H] -> logits [B, T, V] per head."""
        return [head(block(final)) for block, head in zip(self.blocks, self.lm_heads)]

    def export(self, out: Path, num_heads: int | None = None) -> None:
        """Writes `config.json` + `model.safetensors` as vLLM's `MedusaModel` loads them; with
        `num_heads`, only the first that many heads (vLLM drafts exactly one token per head, so
        k = num_speculative_tokens must equal the head count)."""
        n = num_heads or len(self.blocks)
        h, v = self.lm_heads[0].in_features, self.lm_heads[0].out_features
        out.mkdir(parents=True, exist_ok=True)
        cfg = {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": h,
               "vocab_size": v, "num_heads": n, "num_hidden_layers": 1}
        (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        tensors = {}
        for i in range(n):
            tensors[f"blocks.{i}.layers.0.weight"] = self.blocks[i].layers[0].weight.detach().clone()
            tensors[f"lm_heads.{i}.weight"] = self.lm_heads[i].weight.detach().clone()
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def slice_checkpoint(src: Path, out: Path, num_heads: int) -> None:
    """Copies the first `num_heads` heads of an exported Medusa checkpoint `src` into `out`.

    Raises:
        ValueError: `src` holds fewer heads.
    """
    cfg = json.loads((src / "config.json").read_text())
    if num_heads > cfg["num_heads"]:
        raise ValueError(f"num_heads: {src} holds {cfg['num_heads']} heads, asked for {num_heads}")
    tensors = {k: v for k, v in load_file(str(src / "model.safetensors")).items()
               if int(k.split(".")[1]) < num_heads}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({**cfg, "num_heads": num_heads}, indent=2,
                                                sort_keys=True) + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
