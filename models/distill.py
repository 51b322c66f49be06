"""Distilling the draft from the target: target-written text and the target's own distributions.

The draft is trained to minimise KL(p_target || p_draft) at every position (Hinton et al. 2015,
temperature 1) on a mix of corpus windows and continuations the target wrote itself (greedy and
sampled, from raw and chat-template prompts: `models.head_data.write_sequences`), i.e. on the
prefixes it meets when it drafts for the target in vLLM.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from models.stream import TokenStream


@torch.no_grad()
def continue_tokens(model: LlamaForCausalLM, prompts: torch.Tensor, new_tokens: int,
                    temperature: float, generator: torch.Generator | None = None,
                    batch_size: int = 32) -> torch.Tensor:
    """Extends each prompt by `new_tokens` tokens with a KV cache; EOS does not stop a row.

    Args:
        model: the writer, in eval mode.
        prompts: int64 [N, P]; all rows the same length, so no padding is needed.
        new_tokens: tokens to append per row.
        temperature: 0 picks the argmax (greedy); > 0 samples softmax(logits / temperature).
        generator: random source for sampling (required when temperature > 0).
        batch_size: rows per forward pass.

    Returns:
        int64 [N, P + new_tokens].

    Raises:
        ValueError: temperature < 0, or > 0 without a generator.
    """
    if temperature < 0 or (temperature > 0 and generator is None):
        raise ValueError(f"temperature: {temperature} needs >= 0 and a generator when > 0")
    chunks = []
    for rows in prompts.split(batch_size):
        out = model(input_ids=rows, use_cache=True)
        seq = [rows]
        for _ in range(new_tokens):
            logits = out.logits[:, -1, :]  # [B, V]
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            seq.append(nxt)
            out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
        chunks.append(torch.cat(seq, dim=1))
    return torch.cat(chunks)


def kl_loss(draft: LlamaForCausalLM, target: LlamaForCausalLM) -> Callable[[torch.Tensor], torch.Tensor]:
    """Loss fn: batch int64 [B, T] -> mean over B*T positions of KL(p_target || p_draft), nats."""
    def loss(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            t_logp = F.log_softmax(target(input_ids=batch).logits, dim=-1).flatten(0, 1)  # [B*T, V]
        d_logp = F.log_softmax(draft(input_ids=batch).logits, dim=-1).flatten(0, 1)  # [B*T, V]
        return F.kl_div(d_logp, t_logp, log_target=True, reduction="batchmean")
    return loss


def mixed_batches(stream: TokenStream, written: torch.Tensor, batch_size: int,
                  generator: torch.Generator, written_share: float = 0.5) -> Callable[[], torch.Tensor]:
    """Batch source: `written_share` of rows drawn from `written` [M, T], the rest corpus windows.

    Returns a callable giving int64 [batch_size, T] per call.
    """
    n_written = round(batch_size * written_share)
    length = written.shape[1]

    def next_batch() -> torch.Tensor:
        picks = torch.randint(0, written.shape[0], (n_written,), generator=generator)
        corpus = stream.random_windows(batch_size - n_written, length, generator)
        return torch.cat([written[picks], corpus])
    return next_batch
