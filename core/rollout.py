"""A speculator rollout's shared vocabulary: which speculator served a response, live acceptance
per (speculator, task), and the canary verdict.

Which speculator served a response: each pool replica sets vLLM's `system_fingerprint` (OpenAI's
field for "the backend configuration the model runs with", on every non-streaming response and on
a stream's final usage chunk; vLLM 0.32 `--fingerprint-mode custom`) to `speculator_fingerprint`:
one string per pool and speculator checkpoint, e.g. `specserve-speculative-eagle3-v1-vllm-0.32.0`.
The router tallies each speculative response's acceptance histogram under it (`SpeculatorTallies`),
so a canary replica's live acceptance is told apart from the incumbent's, per task type.

Mean acceptance length is vLLM's: 1 + accepted draft tokens / verification steps that carried
drafts (vllm/v1/spec_decode/metrics.py), from each response's
`metrics.speculative_decoding.acceptance_histogram` (h[j]: steps that accepted j drafts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Sequence

# Environment variable of the speculative pool's replicas that puts a candidate speculator on some
# of them (deployments/pools.py): JSON {"model": path, "replicas": N | null (every replica)}.
CANARY_ENV = "SPECSERVE_SPECULATOR_CANARY"
MAX_FINGERPRINTS = 8  # speculators the router keeps tallies for (oldest dropped)

Verdict = Literal["wait", "forward", "back"]


def speculator_fingerprint(pool: str, speculative_config: Mapping | None,
                           vllm_version: str) -> str:
    """The `system_fingerprint` a pool replica answers with.

    Args:
        pool: "vanilla" or "speculative".
        speculative_config: the engine's `speculative_config` (`SpeculatorConfig.to_vllm`);
            None for the vanilla pool.
        vllm_version: `vllm.__version__`.

    Returns:
        `specserve-<pool>-<tag>-vllm-<version>`, the tag being the speculator checkpoint's folder
        name (`eagle3-v1`), or the method for n-gram, or `target` without a speculator.
    """
    if not speculative_config:
        tag = "target"
    elif speculative_config.get("model"):
        tag = Path(str(speculative_config["model"]).rstrip("/")).name
    else:
        tag = str(speculative_config.get("method", "speculator"))
    return f"specserve-{pool}-{tag}-vllm-{vllm_version}"


def parse_canary(raw: str) -> tuple[str, int | None]:
    """`CANARY_ENV`'s value -> (candidate checkpoint path, replicas serving it; None: all).

    Raises:
        ValueError: not JSON `{"model": str, "replicas": int >= 1 | null}` (names the variable).
    """
    try:
        spec = json.loads(raw)
        model, replicas = spec["model"], spec.get("replicas")
        if not isinstance(model, str) or not model:
            raise ValueError("model: expected a checkpoint path")
        if replicas is not None and (not isinstance(replicas, int) or replicas < 1):
            raise ValueError(f"replicas: expected an integer >= 1 or null, got {replicas!r}")
    except (TypeError, KeyError, ValueError) as e:
        raise ValueError(f"{CANARY_ENV}: expected JSON {{\"model\": path, \"replicas\": N | null}}"
                         f", got {raw!r} ({e})") from None
    return model, replicas


def canary_env(model: str, replicas: int | None) -> str:
    """The `CANARY_ENV` value putting `model` on `replicas` replicas (None: every replica)."""
    return json.dumps({"model": model, "replicas": replicas})


@dataclass(slots=True)
class Tally:
    """One (speculator, task)'s counts since the router replica started.

    Attributes:
        requests: speculative responses that reported a histogram.
        steps: verification steps that carried drafts (Σ h[j]).
        accepted: draft tokens accepted (Σ j·h[j]).
    """

    requests: int = 0
    steps: int = 0
    accepted: int = 0

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / steps (vLLM's definition); 0.0 with no steps."""
        return 1.0 + self.accepted / self.steps if self.steps else 0.0

    def add(self, other: "Tally") -> None:
        self.requests += other.requests
        self.steps += other.steps
        self.accepted += other.accepted


@dataclass
class SpeculatorTallies:
    """Live acceptance per speculator fingerprint and task type, as the router observes it."""

    _tallies: dict[str, dict[str, Tally]] = field(default_factory=dict)

    def observe(self, fingerprint: str | None, task: str, histogram: Sequence[int]) -> None:
        """Adds one response's raw acceptance histogram (before any adjustment) under its
        `system_fingerprint`; responses without one are not tallied."""
        if not fingerprint:
            return
        by_task = self._tallies.get(fingerprint)
        if by_task is None:
            if len(self._tallies) >= MAX_FINGERPRINTS:
                del self._tallies[next(iter(self._tallies))]
            by_task = self._tallies[fingerprint] = {}
        t = by_task.setdefault(task, Tally())
        t.requests += 1
        t.steps += sum(histogram)
        t.accepted += sum(j * h for j, h in enumerate(histogram))

    def counts(self) -> dict[str, dict[str, list[int]]]:
        """{fingerprint: {task: [requests, steps, accepted]}}: what a replica publishes."""
        return {fp: {task: [t.requests, t.steps, t.accepted] for task, t in by_task.items()}
                for fp, by_task in self._tallies.items()}


def merge_counts(published: Sequence[Mapping]) -> dict[str, dict[str, Tally]]:
    """Sums several replicas' `SpeculatorTallies.counts()`."""
    out: dict[str, dict[str, Tally]] = {}
    for counts in published:
        for fp, by_task in counts.items():
            for task, (requests, steps, accepted) in by_task.items():
                out.setdefault(fp, {}).setdefault(task, Tally()).add(
                    Tally(requests, steps, accepted))
    return out


@dataclass(frozen=True)
class RolloutParams:
    """When a canary's live acceptance is enough to decide, and which way.

    Attributes:
        min_steps: verification steps a task needs on both speculators to be compared.
        max_regression: back when any compared task's candidate mean acceptance length is below
            (1 - max_regression) x the incumbent's.
        min_ratio: forward needs the step-weighted ratio over compared tasks (candidate /
            incumbent mean acceptance length) >= min_ratio. 0.95 by default: the live windows
            differ in traffic (the incumbent's is measured before and beside the canary), and the
            retrain gate already demanded its margin offline (models/retrain.py); raise it above
            1 to demand a live gain.
    """

    min_steps: int = 200
    max_regression: float = 0.05
    min_ratio: float = 0.95


def decide(incumbent: Mapping[str, Tally], candidate: Mapping[str, Tally],
           params: RolloutParams) -> tuple[Verdict, dict]:
    """The canary verdict from both speculators' live tallies per task.

    Returns:
        ("wait" | "forward" | "back", detail): detail maps each task to its tallies and ratio
        (candidate / incumbent mean acceptance length; None when not compared) and gives the
        step-weighted `ratio` over compared tasks. "wait" while no task has `min_steps` on both.
    """
    tasks: dict[str, dict] = {}
    num = den = 0.0
    regressed = []
    for task in sorted(set(incumbent) | set(candidate)):
        inc, cand = incumbent.get(task, Tally()), candidate.get(task, Tally())
        row = {"incumbent": inc.mean_acceptance_length, "candidate": cand.mean_acceptance_length,
               "incumbent_steps": inc.steps, "candidate_steps": cand.steps, "ratio": None}
        if inc.steps >= params.min_steps and cand.steps >= params.min_steps:
            row["ratio"] = cand.mean_acceptance_length / inc.mean_acceptance_length
            num += cand.steps * cand.mean_acceptance_length
            den += cand.steps * inc.mean_acceptance_length
            if row["ratio"] < 1.0 - params.max_regression:
                regressed.append(task)
        tasks[task] = row
    ratio = num / den if den else None
    detail = {"tasks": tasks, "ratio": ratio, "regressed": regressed}
    if ratio is None:
        return "wait", detail
    if regressed or ratio < params.min_ratio:
        return "back", detail
    return "forward", detail


def snapshot_at(history: Sequence[tuple[float, Mapping[str, Tally]]], t: float
                ) -> Mapping[str, Tally]:
    """The newest snapshot of `history` ((time s, {task: Tally}), oldest first) taken at or
    before `t`; the oldest one when none is (so a short history gives a shorter window)."""
    start = history[0][1] if history else {}
    for when, tallies in history:
        if when <= t:
            start = tallies
    return start


def tally_since(end: Mapping[str, Tally], start: Mapping[str, Tally]) -> dict[str, Tally]:
    """Per-task counts accumulated from the cumulative tallies `start` to `end`; a task whose
    counts went down (a router replica restarted and its counts left the sum) is left out."""
    out = {}
    for task, last in end.items():
        first = start.get(task, Tally())
        d = Tally(last.requests - first.requests, last.steps - first.steps,
                  last.accepted - first.accepted)
        if d.steps >= 0 and d.accepted >= 0 and d.requests >= 0:
            out[task] = d
    return out


def window_tallies(history: Sequence[tuple[float, Mapping[str, Tally]]], now: float,
                   window_s: float) -> dict[str, Tally]:
    """Per-task counts accumulated over the last `window_s` from snapshots of cumulative tallies.

    Args:
        history: (time s, {task: Tally}) of one speculator, oldest first, cumulative.
        now: the time of the newest snapshot to count to.
        window_s: seconds back from `now`; the window starts at `snapshot_at(now - window_s)`.

    Returns:
        {task: Tally} of the differences (`tally_since`).
    """
    if not history:
        return {}
    return tally_since(history[-1][1], snapshot_at(history, now - window_s))


def drifted_tasks(history: Sequence[tuple[float, Mapping[str, Tally]]], now: float,
                  window_s: float, baseline_s: float, ratio: float, min_steps: int
                  ) -> dict[str, tuple[float, float]]:
    """Tasks whose live acceptance fell: E[τ] − 1 over `window_s` below `ratio` x E[τ] − 1 over
    `baseline_s` (the `SpecserveAcceptanceDrift` alert's rule, cluster/observability/alerts.py),
    each window holding at least `min_steps` verification steps.

    Returns:
        {task: (mean acceptance length over window_s, over baseline_s)}.
    """
    recent = window_tallies(history, now, window_s)
    baseline = window_tallies(history, now, baseline_s)
    out = {}
    for task, r in recent.items():
        b = baseline.get(task)
        if b is None or r.steps < min_steps or b.steps < min_steps:
            continue
        if r.mean_acceptance_length - 1 < ratio * (b.mean_acceptance_length - 1):
            out[task] = (r.mean_acceptance_length, b.mean_acceptance_length)
    return out
