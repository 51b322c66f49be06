"""One training loop for both models: AdamW, linear warmup then cosine decay, gradient clipping.

What differs between pre-training the target and distilling the draft is only the batches and
the loss, both passed in as callables.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm


@dataclass(frozen=True, slots=True)
class Schedule:
    """Optimiser settings; `lr` is the peak learning rate reached after `warmup_steps`."""

    steps: int
    lr: float
    warmup_steps: int
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip_norm: float = 1.0

    def lr_factor(self, step: int) -> float:
        """Multiplier of `lr` at 0-based `step`: linear 1/w..1 over warmup, then cosine to min_lr_ratio."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass(frozen=True, slots=True)
class TrainStats:
    """What one training run did; losses in nats/token.

    first_loss and last_loss are means over the first and last 10% of steps; loss_curve holds the
    means of (up to) 10 equal runs of consecutive steps, in order.
    """

    steps: int
    tokens: int
    wall_s: float
    first_loss: float
    last_loss: float
    loss_curve: tuple[float, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


def _optimizer(model: torch.nn.Module, schedule: Schedule) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms), betas (0.9, 0.95)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": schedule.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=schedule.lr, betas=(0.9, 0.95), eps=1e-8)


def train(model: torch.nn.Module, next_batch: Callable[[], torch.Tensor],
          loss_fn: Callable[[torch.Tensor], torch.Tensor], schedule: Schedule,
          desc: str) -> TrainStats:
    """Runs `schedule.steps` optimiser steps on `model` in place.

    Args:
        model: trained in place, left in eval mode.
        next_batch: returns the next int64 batch [B, T]; tokens counted = B * T.
        loss_fn: batch -> scalar loss (nats/token) that depends on `model`.
        schedule: steps and learning-rate schedule.
        desc: tqdm label.

    Raises:
        FloatingPointError: the loss became NaN or infinite.
    """
    optimizer = _optimizer(model, schedule)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule.lr_factor)
    model.train()
    losses, tokens, start = [], 0, time.perf_counter()
    bar = tqdm(range(schedule.steps), desc=desc, unit="step", mininterval=2.0)
    for step in bar:
        batch = next_batch()
        loss = loss_fn(batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{desc}: loss {loss.item()} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip_norm)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        tokens += batch.numel()
        bar.set_postfix(loss=f"{losses[-1]:.3f}", tok_s=f"{tokens / (time.perf_counter() - start):.0f}",
                        refresh=False)
    wall_s = time.perf_counter() - start
    model.eval()
    tail = max(1, len(losses) // 10)
    chunks = [losses[i * len(losses) // 10:(i + 1) * len(losses) // 10] for i in range(10)]
    return TrainStats(steps=schedule.steps, tokens=tokens, wall_s=wall_s,
                      first_loss=sum(losses[:tail]) / tail if losses else math.nan,
                      last_loss=sum(losses[-tail:]) / tail if losses else math.nan,
                      loss_curve=tuple(round(sum(c) / len(c), 4) for c in chunks if c))
