"""Every parameter of a speculator-heads build (EAGLE-3 and Medusa), in one frozen dataclass.

Kept apart from `models.params.BuildParams` so that training heads never changes the digest of the
target and draft build. A head's identity is the hash of these fields, `HEADS_CODE_VERSION` and the
target's build digest (see `models.heads`). The defaults are the CI build: about 3-5 minutes on 2
CPU cores including the target-written training data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

# Bumped whenever a code change alters the weights given HeadParams produce.
HEADS_CODE_VERSION = "heads-1"


@dataclass(frozen=True, slots=True)
class HeadParams:
    """What the heads train on and how; lengths in tokens of the lab's tokenizer."""

    seed: int = 0
    # Training data: the target continues `sequences` random train-split prompts of `prompt_len`
    # tokens by `new_tokens` tokens; row i is written at temperatures[i % len(temperatures)].
    sequences: int = 128
    prompt_len: int = 32
    new_tokens: int = 128
    temperatures: tuple[float, ...] = (0.0, 0.0, 1.0)
    # Row i's prompt: a corpus window as is ("raw") or wrapped as one user turn of the chat template
    # ("chat", how the chat API serves), by prompt_formats[i % len(prompt_formats)].
    prompt_formats: tuple[Literal["raw", "chat"], ...] = ("raw", "chat")
    # EAGLE-3: the target's layer outputs it fuses (vLLM aux ids: 0 = embeddings, i = output of
    # decoder layer i-1 with the residual added), low / mid / high for the 6-layer target.
    aux_layer_ids: tuple[int, ...] = (2, 4, 6)
    # Unrolled training-time-test steps (the head's own hidden state fed back); drafts at k <= 5
    # never use more.
    ttt_steps: int = 5
    ttt_decay: float = 0.8
    eagle3_steps: int = 240
    eagle3_lr: float = 3e-3
    # EAGLE-1 (opt-in, `--kinds eagle`): one layer over the target's final hidden state, same
    # training-time test and learning rate as EAGLE-3.
    eagle_steps: int = 240
    # Medusa-1: K heads on the frozen target's final (post-norm) hidden state; head k predicts the
    # token k + 2 ahead.
    medusa_heads: int = 5
    medusa_steps: int = 150
    medusa_lr: float = 2e-3
    batch_size: int = 4
    warmup_steps: int = 10
    # Held-out evaluation in torch: target-written sequences from held-out prompts.
    eval_sequences: int = 16

    def __post_init__(self) -> None:
        for name in ("sequences", "prompt_len", "new_tokens", "ttt_steps", "medusa_heads",
                     "batch_size", "eval_sequences"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("eagle3_steps", "eagle_steps", "medusa_steps", "warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if len(set(self.aux_layer_ids)) != len(self.aux_layer_ids) or min(self.aux_layer_ids) < 1:
            raise ValueError(f"aux_layer_ids: must be distinct layer outputs >= 1, "
                             f"got {self.aux_layer_ids}")
        if not self.prompt_formats or set(self.prompt_formats) - {"raw", "chat"}:
            raise ValueError(f"prompt_formats: must be non-empty, of 'raw' and 'chat', "
                             f"got {self.prompt_formats}")
        if not self.temperatures or min(self.temperatures) < 0:
            raise ValueError(f"temperatures: must be non-empty and >= 0, got {self.temperatures}")

    def as_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)
