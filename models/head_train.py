"""Losses, batches and torch-side evaluation for the speculator heads.

Both heads learn the frozen target's full next-token distribution (forward KL(p_target ‖ p_head),
Hinton et al. 2015 at temperature 1) at every position of target-written sequences, not only its
sampled token. Torch-side evaluation is teacher-forced greedy agreement per draft position: the
fraction of anchors where the head's argmax equals the target's, given correct earlier tokens,
i.e. an estimate of vLLM's conditional per-position acceptance α_j at temperature 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from core.stats import per_position_acceptance
from models.eagle3 import Eagle3Head
from models.head_data import HeadData, target_logprobs
from models.medusa import MedusaHeads


def row_batches(data: HeadData, batch_size: int, generator: torch.Generator) -> Callable[[], torch.Tensor]:
    """Batch source for `models.train.train`: int64 [B, T] whose column 0 holds random row indices
    of `data` (the shape makes train() count B * T tokens; the loss reads only column 0)."""
    n, t = data.ids.shape

    def next_batch() -> torch.Tensor:
        return torch.randint(0, n, (batch_size,), generator=generator)[:, None].expand(batch_size, t)
    return next_batch


def _kl(head_logits: torch.Tensor, target_logp: torch.Tensor) -> torch.Tensor:
    """Mean KL(p_target ‖ p_head) in nats over positions; both [B, T', V]."""
    d = F.log_softmax(head_logits, dim=-1).flatten(0, 1)
    return F.kl_div(d, target_logp.flatten(0, 1), log_target=True, reduction="batchmean")


def _step_pairs(logits: list[torch.Tensor], target_logp: torch.Tensor):
    """(head logits, target log-probs) per draft position j, both [B, T - 1 - j, V].

    Draft position j at anchor i predicts the token after position i + j + 1, which the target's
    distribution at position i + j + 1 describes.
    """
    t = target_logp.shape[1]
    return [(lg[:, :t - 1 - j], target_logp[:, j + 1:]) for j, lg in enumerate(logits)]


def eagle3_loss(head: Eagle3Head, target: LlamaForCausalLM, data: HeadData, steps: int,
                decay: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Loss fn: Σ_j decay^j KL_j / Σ_j decay^j over `steps` unrolled training-time-test steps
    (EAGLE-3 or EAGLE-1: the head's `feature` names the target features it reads)."""
    weights = [decay ** j for j in range(steps)]

    def loss(batch: torch.Tensor) -> torch.Tensor:
        d = data.rows(batch[:, 0])
        features = getattr(d, head.feature)
        pairs = _step_pairs(head.unrolled(features, d.ids, steps), target_logprobs(target, d.final))
        return sum(w * _kl(h, t) for w, (h, t) in zip(weights, pairs)) / sum(weights)
    return loss


def medusa_loss(heads: MedusaHeads, target: LlamaForCausalLM,
                data: HeadData) -> Callable[[torch.Tensor], torch.Tensor]:
    """Loss fn: mean over heads of KL to the target's distribution k + 1 positions later."""
    def loss(batch: torch.Tensor) -> torch.Tensor:
        d = data.rows(batch[:, 0])
        pairs = _step_pairs(heads(d.final), target_logprobs(target, d.final))
        return sum(_kl(h, t) for h, t in pairs) / len(pairs)
    return loss


@torch.no_grad()
def agreement(logits: list[torch.Tensor], target: LlamaForCausalLM, data: HeadData) -> dict:
    """Teacher-forced greedy agreement per draft position and the mean acceptance length it implies.

    Returns:
        {"alpha": [α_1..α_k], "mean_acceptance_length": 1 + Σ_i Π_{j<=i} α_j} (Leviathan et al.
        2023 eq. 1 in per-position form, bonus token included).
    """
    pairs = _step_pairs(logits, target_logprobs(target, data.final))
    alpha = [(h.argmax(-1) == t.argmax(-1)).float().mean().item() for h, t in pairs]
    length, run = 1.0, 1.0
    for a in alpha:
        run *= a
        length += run
    return {"alpha": [round(a, 4) for a in alpha], "mean_acceptance_length": round(length, 4)}


@torch.no_grad()
def chain_acceptance(logits: list[torch.Tensor], target: LlamaForCausalLM, data: HeadData,
                     start: int) -> dict:
    """Per-position acceptance as vLLM counts it for a chain drafter at temperature 0.

    Each greedy row is decoded from `start` (its prompt length) as vLLM does: with tokens < L
    verified, the drafter starts at anchor L - 2 and its drafts are accepted while they equal the
    target's argmax; then L grows by the accepted count + 1 (the bonus token). Draft j at anchor a
    is unrolled step j there: until a draft is rejected the drafter's inputs are the true tokens,
    so the teacher-forced `logits` give its drafts. Unlike `agreement`, α_j is conditional on
    α_1..α_{j-1} and only anchors the walk visits count: on a loop of period 2 a head right at one
    phase only gets α_1 = 1 and α_2 = 0 here, but 0.5 and 0.5 in `agreement`.

    Returns:
        {"alpha": [α_1..α_k], "mean_acceptance_length": 1 + accepted / drafts, "drafts": n}.
    """
    pairs = _step_pairs(logits, target_logprobs(target, data.final))
    ok = [h.argmax(-1) == t.argmax(-1) for h, t in pairs]  # [B, T - 1 - j] per draft position j
    k, t = len(logits), data.ids.shape[1]
    drafts, accepted = 0, [0] * k
    for row in range(data.ids.shape[0]):
        length = start + 1
        while length + k <= t:
            n = 0
            while n < k and ok[n][row, length - 2]:
                n += 1
            drafts += 1
            for j in range(n):
                accepted[j] += 1
            length += n + 1
    return {"alpha": [round(a, 4) for a in per_position_acceptance(drafts, accepted)],
            "mean_acceptance_length": round(1 + sum(accepted) / drafts, 4) if drafts else 1.0,
            "drafts": drafts}


def eagle3_agreement(head: Eagle3Head, target: LlamaForCausalLM, data: HeadData, steps: int,
                     start: int | None = None) -> dict:
    """`agreement` of an EAGLE-3 (or EAGLE-1, a subclass) head unrolled `steps` times over `data`;
    with `start` (the rows' prompt length) also its `chain_acceptance` under "chain"."""
    head.eval()
    with torch.no_grad():
        logits = head.unrolled(getattr(data, head.feature), data.ids, steps)
        out = agreement(logits, target, data)
        if start is not None:
            out["chain"] = chain_acceptance(logits, target, data, start)
        return out


def medusa_agreement(heads: MedusaHeads, target: LlamaForCausalLM, data: HeadData) -> dict:
    """`agreement` of Medusa heads over `data`."""
    heads.eval()
    with torch.no_grad():
        return agreement(heads(data.final), target, data)
