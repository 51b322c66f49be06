"""Offered load per request class, from the router to the autoscaling policy.

Every router (ingress replica, batch driver) counts the requests it decides, per class, since it
started (`ArrivalCounter`); it publishes the cumulative counts to the StatsBoard with its other
shared state, and the board turns each publisher's counts within a window into rates
(`offered_load`). A class is (task type, may go speculative): what the budget split
(autoscaling/split.py) needs to predict both pools' goodput (`autoscaling.goodput.Load`), with
its E[τ] as the split uses it: tokens per verification step over the class's tokens, Σ tokens /
Σ (tokens / E[τ] of each request) (a token-weighted harmonic mean of the router's estimates).

Tokens are the requests' `max_tokens` (or `max_completion_tokens`) times their sequences (`n`,
prompts): the output a request may ask for, known at arrival. Requests that stop earlier (EOS, a
stop string) make it an overestimate, so the policy errs towards more capacity, never less. A
request refused with 429 and retried counts at each attempt.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

ArrivalCounts = dict[str, dict]  # class key -> {"requests", "tokens", "steps", "gains"}


def class_key(task: str, gains: bool) -> str:
    """The class of a request: its task type, and whether it may run speculative."""
    return f"{task}|{'speculative' if gains else 'vanilla'}"


class ArrivalCounter:
    """One router's cumulative arrivals per class since it was made; not thread-safe (one event
    loop)."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._counts: ArrivalCounts = {}

    def age_s(self) -> float:
        """Seconds since the counts began (the board places the start on its own clock)."""
        return time.monotonic() - self._started

    def observe(self, task: str, gains: bool, tokens: int, expected_tokens: float) -> None:
        """One decided request.

        Args:
            task: its task type.
            gains: it may run on the speculative pool (its decision's eligible pools).
            tokens: output tokens it may ask for (max_tokens × sequences).
            expected_tokens: the router's E[τ] for it on the speculative path (tokens per
                verification step; below 1 counts as 1).
        """
        c = self._counts.setdefault(class_key(task, gains), {
            "requests": 0, "tokens": 0, "steps": 0.0, "gains": gains})
        tokens = max(0, int(tokens))
        c["requests"] += 1
        c["tokens"] += tokens
        c["steps"] += tokens / max(1.0, float(expected_tokens))

    def counts(self) -> ArrivalCounts:
        """A copy of the cumulative counts, to publish."""
        return {k: dict(v) for k, v in self._counts.items()}


def offered_load(histories: Iterable[tuple[float, list[tuple[float, ArrivalCounts]]]],
                 now: float, window_s: float) -> list[dict]:
    """Offered load per class over about the last `window_s` seconds, summed over publishers.

    Args:
        histories: per publisher (its start time, its reports [(t, cumulative counts)] oldest
            first), on the clock of `now` (seconds; the board's).
        now: the current time.
        window_s: how far back the rate looks (> 0).

    Returns:
        [{"class", "tokens_per_s", "requests_per_s", "expected_tokens", "gains"}] per class with
        an arrival in the window. Per publisher the rate is Δcounts / (now − t_base), from a base
        to its newest report: the base is its last report at or before the window's start;
        without one, zero counts at its start time if it started inside the window (its counts
        began there), else its oldest report (what it counted before that, e.g. before a board
        restart, is not known to fall inside the window). Dividing by `now − t_base`, not by the
        newest report's age, lets a publisher that stopped reporting (a replica gone, a batch
        job done) fade out instead of keeping its last rate. expected_tokens: Δtokens / Δsteps of
        the class over all publishers (1.0 where no tokens arrived).
    """
    start = now - window_s
    total: dict[str, dict] = {}
    for started, reports in histories:
        if not reports:
            continue
        before = [r for r in reports if r[0] <= start]
        t_base, base = before[-1] if before else (started, {}) if started > start else reports[0]
        _, last = reports[-1]
        if now <= t_base or last is base:
            continue
        for key, c in last.items():
            old = base.get(key, {"requests": 0, "tokens": 0, "steps": 0.0})
            requests = c["requests"] - old["requests"]
            if requests <= 0:
                continue
            t = total.setdefault(key, {"class": key, "requests_per_s": 0.0, "tokens_per_s": 0.0,
                                       "tokens": 0, "steps": 0.0, "gains": c["gains"]})
            t["requests_per_s"] += requests / (now - t_base)
            t["tokens_per_s"] += (c["tokens"] - old["tokens"]) / (now - t_base)
            t["tokens"] += c["tokens"] - old["tokens"]
            t["steps"] += c["steps"] - old["steps"]
    return [{"class": t["class"], "tokens_per_s": t["tokens_per_s"],
             "requests_per_s": t["requests_per_s"],
             "expected_tokens": t["tokens"] / t["steps"] if t["steps"] > 0 else 1.0,
             "gains": t["gains"]} for t in total.values()]
