"""Held-out measurements: language-model loss and the draft's greedy agreement with the target.

Agreement is measured on continuations the target writes greedily from held-out prompts; the draft
is teacher-forced on them. At temperature 0 the draft's proposal for a position, given that all its
earlier proposals were accepted, is exactly its argmax on the target's prefix, so replaying those
argmaxes reproduces greedy speculative decoding (up to float round-off in vLLM's kernels).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import LlamaForCausalLM

from core.stats import per_position_acceptance
from models.distill import continue_tokens


@torch.no_grad()
def heldout_loss(model: LlamaForCausalLM, windows: torch.Tensor, batch_size: int = 16) -> float:
    """Mean next-token cross-entropy in nats/token over windows int64 [N, T] (N*(T-1) predictions)."""
    total, count = 0.0, 0
    for rows in windows.split(batch_size):
        logits = model(input_ids=rows[:, :-1]).logits  # [B, T-1, V]
        total += torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), rows[:, 1:].flatten(), reduction="sum").item()
        count += rows[:, 1:].numel()
    return total / count


@dataclass(frozen=True, slots=True)
class Agreement:
    """Greedy draft-vs-target agreement on target-written continuations.

    alpha: fraction of positions where the draft's argmax equals the target's token (per-token
        acceptance at temperature 0).
    alpha_by_pos: alpha_j for j = 1..k, P(proposal j accepted | proposals < j accepted), from
        the replay below (the quantity vLLM's per-position counters give).
    mean_acceptance_length: tokens per target step when replaying greedy speculation with k
        proposals per step (accepted + 1 bonus), i.e. vLLM's 1 + accepted / drafts.
    """

    positions: int
    alpha: float
    k: int
    alpha_by_pos: tuple[float, ...]
    mean_acceptance_length: float

    def as_dict(self) -> dict:
        return asdict(self)


def replay_speculation(match: torch.Tensor, k: int) -> tuple[int, int, list[int]]:
    """Replays greedy speculation with k proposals per step over one row of match flags bool [n].

    match[i] says whether the draft's argmax at position i equals the target's token. Each step
    accepts the leading run of matches (at most k) and then emits the target's own token.

    Returns:
        (target steps, accepted proposals, accepted count per proposal position [k]).
    """
    flags, pos, steps, accepted, at_pos = match.tolist(), 0, 0, 0, [0] * k
    while pos < len(flags):
        run = 0
        while run < k and pos + run < len(flags) and flags[pos + run]:
            at_pos[run] += 1
            run += 1
        steps += 1
        accepted += run
        pos += run + 1  # accepted proposals + the target's own token
    return steps, accepted, at_pos


@torch.no_grad()
def greedy_agreement(draft: LlamaForCausalLM, target: LlamaForCausalLM, prompts: torch.Tensor,
                     new_tokens: int, k: int = 4) -> Agreement:
    """Agreement of `draft` with `target` on greedy continuations of prompts int64 [N, P].

    Raises:
        ValueError: new_tokens < 1 or k < 1.
    """
    if new_tokens < 1 or k < 1:
        raise ValueError(f"new_tokens and k must be >= 1, got {new_tokens}, {k}")
    seqs = continue_tokens(target, prompts, new_tokens, temperature=0.0)  # [N, P + new]
    p = prompts.shape[1]
    guesses = draft(input_ids=seqs[:, :-1]).logits[:, p - 1:].argmax(dim=-1)  # [N, new]
    match = guesses == seqs[:, p:]
    steps = accepted = 0
    at_pos = [0] * k
    for row in match:
        s, a, ap = replay_speculation(row, k)
        steps, accepted = steps + s, accepted + a
        at_pos = [x + y for x, y in zip(at_pos, ap)]
    alpha_by_pos = tuple(per_position_acceptance(steps, at_pos))
    return Agreement(positions=match.numel(), alpha=match.float().mean().item(), k=k,
                     alpha_by_pos=alpha_by_pos, mean_acceptance_length=1 + accepted / steps)
