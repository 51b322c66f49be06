"""specserve's day-shaped load trace: seeded, with bursts, for the autoscaling simulator.

Arrivals are a Poisson process with rate λ(t) requests/s over 24 h:
λ(t) = base + (peak − base) · d(t) · b(t), where d(t) = ((1 − cos(2π (t − 4 h) / 24 h)) / 2)^2
is a diurnal curve (trough at 04:00, peak at 16:00) and b(t) multiplies by `burst_factor` during
bursts (each ~`burst_s` long, about `bursts_per_day` of them, at seeded random times, work hours
weighted). Each request carries a task type, drawn with a day-dependent mix (more code and math in
work hours, more chat in the evening), and an output length (lognormal, median `median_tokens`).

Example:
    >>> reqs = list(day_trace(TraceParams(hours=0.1)))
    >>> reqs[0].t >= 0 and reqs[0].task in TASKS
    True
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterator

TASKS = ("code", "math", "extraction", "chat", "creative")
DAY_S = 24 * 3600


@dataclass(frozen=True, slots=True)
class TraceParams:
    """Shape of the day (defaults: a small service, ~0.4 M requests a day)."""

    seed: int = 8
    hours: float = 24.0
    base_rps: float = 0.5
    peak_rps: float = 9.0
    bursts_per_day: int = 6
    burst_s: float = 900.0
    burst_factor: float = 2.5
    median_tokens: int = 160
    max_tokens: int = 1024


@dataclass(frozen=True, slots=True)
class Request:
    """One arrival: time (s since midnight), task type, output tokens."""

    t: float
    task: str
    tokens: int


def diurnal(t: float) -> float:
    """d(t) in [0, 1]: 0 at 04:00, 1 at 16:00."""
    return ((1 - math.cos(2 * math.pi * (t - 4 * 3600) / DAY_S)) / 2) ** 2


def task_mix(t: float) -> list[float]:
    """Weights of TASKS at time t: code/math/extraction peak in work hours, chat in the evening."""
    hour = (t / 3600) % 24
    work = 1.0 if 9 <= hour < 18 else 0.35
    return [0.35 * work, 0.1 * work, 0.1 * work, 0.35 + 0.2 * (hour >= 18), 0.1]


def _bursts(p: TraceParams, rng: random.Random) -> list[tuple[float, float]]:
    """(start, end) of each burst, work hours three times as likely."""
    out = []
    while len(out) < p.bursts_per_day * p.hours / 24:
        start = rng.uniform(0, p.hours * 3600)
        hour = (start / 3600) % 24
        if rng.random() < (1.0 if 9 <= hour < 18 else 1 / 3):
            out.append((start, start + rng.expovariate(1 / p.burst_s)))
    return sorted(out)


def rate(t: float, p: TraceParams, bursts: list[tuple[float, float]]) -> float:
    """λ(t), requests per second."""
    boost = p.burst_factor if any(a <= t < b for a, b in bursts) else 1.0
    return p.base_rps + (p.peak_rps - p.base_rps) * diurnal(t) * boost


def day_trace(p: TraceParams = TraceParams()) -> Iterator[Request]:
    """Arrivals in time order (thinning of a Poisson process at the maximum rate)."""
    rng = random.Random(p.seed)
    bursts = _bursts(p, rng)
    lam_max = p.base_rps + (p.peak_rps - p.base_rps) * p.burst_factor
    t, end = 0.0, p.hours * 3600
    while True:
        t += rng.expovariate(lam_max)
        if t >= end:
            return
        if rng.random() * lam_max > rate(t, p, bursts):
            continue
        task = rng.choices(TASKS, weights=task_mix(t))[0]
        tokens = min(p.max_tokens, max(1, int(rng.lognormvariate(math.log(p.median_tokens), 0.7))))
        yield Request(t, task, tokens)
