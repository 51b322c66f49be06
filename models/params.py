"""Every parameter of a model-lab build, in one frozen dataclass (no torch import here).

The defaults are the CI build: about 10 minutes on 2 CPU cores. A build's identity is the hash of
these fields, the corpus digest and `CODE_VERSION` (see `models.manifest`).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TypeVar

# Bumped whenever a code change alters the weights a given BuildParams produces.
CODE_VERSION = "models-1"


@dataclass(frozen=True, slots=True)
class LlamaShape:
    """Width and depth of one Llama; head_dim = hidden_size // num_heads."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size: {self.hidden_size} is not a multiple of "
                             f"num_heads {self.num_heads}")


@dataclass(frozen=True, slots=True)
class BuildParams:
    """What to build and how; token counts are in tokens of the lab's tokenizer."""

    seed: int = 0
    # Tokenizer and shared model settings.
    vocab_size: int = 4096
    max_position_embeddings: int = 1024
    # Models: the draft costs ~1/6 of the target per token (see llama.flops_per_token).
    target_shape: LlamaShape = field(default_factory=lambda: LlamaShape(256, 6, 4, 688))
    draft_shape: LlamaShape = field(default_factory=lambda: LlamaShape(128, 2, 2, 344))
    # Start both models as low-rank bigram models of the train split (see models.bigram); k is
    # the bigram prior's pseudo-count.
    bigram_init: bool = True
    bigram_smoothing: float = 20.0
    # Training batches: batch_size windows of seq_len tokens.
    seq_len: int = 256
    batch_size: int = 8
    target_steps: int = 320
    target_lr: float = 3e-3
    draft_steps: int = 200
    draft_lr: float = 3e-3
    warmup_steps: int = 20
    # Distillation set: sequences the target writes from corpus prompts of distill_prompt_len.
    distill_sequences: int = 128
    distill_prompt_len: int = 32
    # Row i of the set is written at distill_temperatures[i % len] (0 = greedy) from a prompt in
    # distill_prompt_formats[i % len]: a corpus window as is ("raw") or wrapped as one user turn of
    # the chat template ("chat", how the chat API serves). Co-prime lengths cover every pair. The
    # draft learns the target where it drafts for it: behind the same template, at the serving
    # temperatures (greedy first). models/README.md measures the gain over (0.0, 1.0) and
    # ("raw",).
    distill_temperatures: tuple[float, ...] = (0.0, 0.0, 1.0)
    distill_prompt_formats: tuple[str, ...] = ("raw", "chat")
    # Corpus split and sample (max_files=None: every file).
    heldout_fraction: float = 0.05
    max_files: int | None = None
    # Held-out evaluation: loss windows of seq_len; agreement on eval_prompts greedy continuations.
    eval_windows: int = 64
    eval_prompts: int = 32
    eval_prompt_len: int = 32
    eval_new_tokens: int = 96
    speculative_k: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "batch_size", "distill_sequences", "eval_windows",
                     "eval_prompts", "eval_new_tokens", "speculative_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("target_steps", "draft_steps", "warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if not 0 < self.distill_prompt_len < self.seq_len:
            raise ValueError(f"distill_prompt_len: must be in (0, seq_len={self.seq_len})")
        if not self.distill_temperatures or min(self.distill_temperatures) < 0:
            raise ValueError(f"distill_temperatures: must be non-empty and >= 0, "
                             f"got {self.distill_temperatures}")
        if not self.distill_prompt_formats or set(self.distill_prompt_formats) - {"raw", "chat"}:
            raise ValueError(f"distill_prompt_formats: must be non-empty, of 'raw' and 'chat', "
                             f"got {self.distill_prompt_formats}")
        if self.seq_len > self.max_position_embeddings:
            raise ValueError(f"seq_len: {self.seq_len} exceeds max_position_embeddings")

    def as_dict(self) -> dict:
        """Plain-JSON form (nested shapes become dicts)."""
        return asdict(self)


P = TypeVar("P")


def params_from_args(defaults: P, args: argparse.Namespace) -> P:
    """`defaults` (a params dataclass) with every field that the command line also names (a flag
    whose dest is the field's name) taken from `args`."""
    return replace(defaults, **{f.name: getattr(args, f.name) for f in fields(defaults)
                                if hasattr(args, f.name)})
