"""Per-position acceptance α_i per (task type, temperature bucket, context bucket), learned online.

Each speculative response carries vLLM's per-request `metrics.speculative_decoding.acceptance_histogram`
(engine flag `per_request_spec_decode_metrics`); `observe` folds it into exponentially decayed
counts, and `alphas` returns the posterior mean of a Beta prior per position:

    α_i = (accepted_i + s·prior) / (reached_i + s)

with s = `prior_steps` pseudo-steps. Decay: before each observation every count is multiplied by
0.5^(steps / half_life_steps), so the estimate follows drift (a new prompt mix, a new speculator).

Context buckets: a draft trained on short sequences can agree less with the target deep into a
long one (LongSpec, arXiv:2502.17421, on drafts trained at short context; the lab's models train on
256-token windows, models/params.py `seq_len`), and on a long prompt an n-gram speculator finds
more to copy, so contexts of at least each of `CONTEXT_EDGES` tokens learn their own counts; a
bucket with few of its own leans on the next shorter one's estimate (its prior), not on the task's
cold-start prior. Not yet measured per context on our testbed (bench.run's long cell reports the
acceptance of its mix).

Several ingress replicas each observe only the responses they relay: each publishes its own decayed
counts (`local_counts`) through the StatsBoard and adds the others' (`set_remote`), so every replica
estimates from all of the application's speculative responses, at most ~1 s late.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from core.types import TaskType

# Cold-start α per task at temperature 0: our assumption, ordered as the field reports
# (code and math accept most, open chat and creative least); replaced by measurements within
# a few hundred verification steps.
DEFAULT_PRIORS: dict[TaskType, float] = {"code": 0.7, "math": 0.7, "extraction": 0.7,
                                         "chat": 0.5, "creative": 0.4}
# Upper edges of the temperature buckets; vLLM drafts greedily, so acceptance falls as
# temperature rises.
TEMPERATURE_EDGES = (0.0, 0.5, 1.0)
# Lower edges (tokens of context: prompt + half the output limit) of the long-context buckets.
CONTEXT_EDGES = (512, 2048, 8192)


def temperature_bucket(temperature: float) -> str:
    """"t0" for greedy, then "t≤0.5", "t≤1.0", "t>1.0"."""
    for edge in TEMPERATURE_EDGES:
        if temperature <= edge:
            return "t0" if edge == 0.0 else f"t≤{edge}"
    return f"t>{TEMPERATURE_EDGES[-1]}"


def context_bucket(context_tokens: float) -> str:
    """"" below the first of `CONTEXT_EDGES`, else "@L<edge>" for the largest edge reached."""
    reached = [edge for edge in CONTEXT_EDGES if context_tokens >= edge]
    return f"@L{reached[-1]}" if reached else ""


def _shorter(bucket: str) -> str | None:
    """The bucket of the next shorter context ("t0@L2048" -> "t0@L512" -> "t0"; None for
    "t0")."""
    if "@L" not in bucket:
        return None
    temp, edge = bucket.split("@L")
    shorter = [e for e in CONTEXT_EDGES if e < int(edge)]
    return temp + (f"@L{shorter[-1]}" if shorter else "")


@dataclass(slots=True)
class _Counts:
    accepted: list[float]
    reached: list[float]
    steps: float = 0.0


@dataclass
class AcceptanceEstimator:
    """Decayed per-position acceptance counts keyed by (task, temperature bucket + context
    bucket), e.g. ("code", "t0") or ("code", "t0@L512").

    Args:
        num_speculative_tokens: γ, the number of draft positions.
        priors: cold-start α per task (applied to every position and temperature bucket).
        prior_steps: weight of the prior in verification steps.
        half_life_steps: verification steps after which an observation counts half.
    """

    num_speculative_tokens: int
    priors: Mapping[TaskType, float] = field(default_factory=lambda: dict(DEFAULT_PRIORS))
    prior_steps: float = 20.0
    half_life_steps: float = 5000.0
    _counts: dict[tuple[str, str], _Counts] = field(default_factory=dict)
    # Other ingress replicas' decayed counts, summed: key -> (accepted_i, reached_i, steps).
    _remote: dict[tuple[str, str], _Counts] = field(default_factory=dict)

    def observe(self, task: TaskType, temperature: float, histogram: Sequence[int],
                context_tokens: float = 0, drafted: Sequence[int] | None = None,
                accepted: Sequence[int] | None = None) -> None:
        """Adds one request's acceptance at its context (`RequestFeatures.context_tokens`; 0:
        short).

        Args:
            histogram: `histogram[j]`, the request's verification steps that accepted j drafts
                (vLLM's per-request `acceptance_histogram`).
            drafted, accepted: per verification step, the drafts proposed and accepted (vLLM's
                `per_step_drafted` / `per_step_accepted`, metrics level "detailed"). When given
                (same length), position i counts as reached only in steps that drafted beyond
                it, so steps that drafted fewer than γ (vLLM's
                `num_speculative_tokens_per_batch_size` at a large batch) do not count as
                rejections at the positions they never proposed; the histogram's extra steps
                (decode steps without drafts, `RouterDecider.learn`) count as rejections at
                position 1. Without them every histogram step is taken to have drafted γ.
        """
        steps = sum(histogram)
        if steps == 0:
            return
        key = (task, temperature_bucket(temperature) + context_bucket(context_tokens))
        k = self.num_speculative_tokens
        c = self._counts.setdefault(key, _Counts([0.0] * k, [0.0] * k))
        decay = 0.5 ** (steps / self.half_life_steps)
        if drafted is not None and accepted is not None and len(drafted) == len(accepted):
            got, seen = [0.0] * k, [0.0] * k
            for d, a in zip(drafted, accepted):
                for i in range(min(d, a + 1, k)):  # position i proposed and reached
                    seen[i] += 1
                    got[i] += i < a
            seen[0] += max(0, steps - len(drafted))  # steps without drafts: nothing accepted
        else:
            got, seen, reached = [], [], steps
            for i in range(k):
                got.append(sum(histogram[i + 1:]))
                seen.append(reached)
                reached = got[-1]
        for i in range(k):
            c.accepted[i] = c.accepted[i] * decay + got[i]
            c.reached[i] = c.reached[i] * decay + seen[i]
        c.steps = c.steps * decay + steps

    def alphas(self, task: TaskType, temperature: float, context_tokens: float = 0
               ) -> list[float]:
        """Posterior mean α_1..α_γ for the task, temperature and context (tokens; 0: short)."""
        return self._alphas(task, temperature_bucket(temperature)
                            + context_bucket(context_tokens))

    def _alphas(self, task: str, bucket: str) -> list[float]:
        shorter = _shorter(bucket)  # a long-context bucket's prior: the shorter one's estimate
        prior = (self._alphas(task, shorter) if shorter is not None
                 else [self.priors[task]] * self.num_speculative_tokens)
        c = self._merged((task, bucket))
        if c is None:
            return prior
        s = self.prior_steps
        return [(a + s * p) / (r + s) for a, r, p in zip(c.accepted, c.reached, prior)]

    def observed_steps(self, task: TaskType, temperature: float, context_tokens: float = 0
                       ) -> float:
        """Decayed verification steps behind the estimate (0 = prior only)."""
        c = self._merged((task, temperature_bucket(temperature)
                          + context_bucket(context_tokens)))
        return c.steps if c else 0.0

    def table(self) -> dict[tuple[str, str], list[float]]:
        """Every observed key's α_i (for metrics), keyed (task, temperature + context bucket)."""
        return {key: self._alphas(*key) for key in self._counts.keys() | self._remote.keys()}

    def local_counts(self) -> dict[str, tuple[list[float], list[float], float]]:
        """This replica's own decayed counts, keyed "task|bucket" (what it publishes)."""
        return {f"{task}|{bucket}": (list(c.accepted), list(c.reached), c.steps)
                for (task, bucket), c in self._counts.items()}

    def set_remote(self, published: list[dict[str, tuple[list[float], list[float], float]]]) -> None:
        """Replaces the other replicas' counts with their latest `local_counts()`, summed."""
        remote: dict[tuple[str, str], _Counts] = {}
        k = self.num_speculative_tokens
        for counts in published:
            for name, (accepted, reached, steps) in counts.items():
                if len(accepted) != k or len(reached) != k:
                    continue  # published under another num_speculative_tokens
                task, bucket = name.split("|", 1)
                c = remote.setdefault((task, bucket), _Counts([0.0] * k, [0.0] * k))
                c.accepted = [x + y for x, y in zip(c.accepted, accepted)]
                c.reached = [x + y for x, y in zip(c.reached, reached)]
                c.steps += steps
        self._remote = remote

    def _merged(self, key: tuple[str, str]) -> _Counts | None:
        local, remote = self._counts.get(key), self._remote.get(key)
        if local is None or remote is None:
            return local or remote
        return _Counts([a + b for a, b in zip(local.accepted, remote.accepted)],
                       [a + b for a, b in zip(local.reached, remote.reached)],
                       local.steps + remote.steps)


