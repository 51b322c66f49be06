"""Task classifier on the labeled prompts: accuracy, per-task precision/recall, confusion, latency.

    python -m bench.classifier [--split test|dev|all] [--repeats 200]

Reads `bench/prompts/tasks.jsonl` (labeling guide: `bench/prompts/README.md`). Tune rules on `dev`
only; `test` is the honest figure. Latency is the wall time of one `classify_text` call measured
with `time.perf_counter_ns`, every prompt of the split called `--repeats` times: p50/p99 in
microseconds over all calls (includes preemption by other processes), and p50/p99 over prompts of
each prompt's fastest call (the classifier's own cost, with contention mostly filtered out).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from core import TaskType
from router.classify import classify_text

PROMPTS_PATH = Path(__file__).with_name("prompts") / "tasks.jsonl"
TASKS: tuple[TaskType, ...] = get_args(TaskType)
SPLITS = ("dev", "test", "all")


def load_prompts(split: str = "all", path: Path = PROMPTS_PATH) -> list[dict]:
    """Rows (`id`, `task`, `split`, `prompt`, `kind`) of the labeled file in `split` ('all': all)."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows if split == "all" else [r for r in rows if r["split"] == split]


@dataclass(slots=True)
class Scores:
    """Agreement of predictions with labels; `confusion[true][predicted]` counts prompts."""

    confusion: dict[str, dict[str, int]]

    @property
    def total(self) -> int:
        return sum(sum(row.values()) for row in self.confusion.values())

    @property
    def accuracy(self) -> float:
        return sum(self.confusion[t][t] for t in TASKS) / max(self.total, 1)

    def precision(self, task: str) -> float:
        predicted = sum(self.confusion[t][task] for t in TASKS)
        return self.confusion[task][task] / predicted if predicted else 0.0

    def recall(self, task: str) -> float:
        labeled = sum(self.confusion[task].values())
        return self.confusion[task][task] / labeled if labeled else 0.0


def score(rows: list[dict], classify: Callable[[str], str] = classify_text) -> Scores:
    """Confusion of `classify` over `rows` (rows = true task, columns = predicted task)."""
    confusion = {t: {p: 0 for p in TASKS} for t in TASKS}
    for row in rows:
        confusion[row["task"]][classify(row["prompt"])] += 1
    return Scores(confusion)


@dataclass(slots=True)
class Latency:
    """Microseconds per `classify` call: over all calls, and over each prompt's fastest call."""

    p50_us: float
    p99_us: float
    best_p50_us: float
    best_p99_us: float


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(int(q * len(sorted_values)), len(sorted_values) - 1)]


def latency(rows: list[dict], repeats: int, classify: Callable[[str], str] = classify_text
            ) -> Latency:
    """Times single `classify` calls, every prompt of `rows` called `repeats` times."""
    per_prompt_ns: list[list[int]] = [[] for _ in rows]
    for _ in range(repeats):
        for row, samples in zip(rows, per_prompt_ns):
            text = row["prompt"]
            t0 = time.perf_counter_ns()
            classify(text)
            samples.append(time.perf_counter_ns() - t0)
    every = sorted(ns / 1000 for samples in per_prompt_ns for ns in samples)
    best = sorted(min(samples) / 1000 for samples in per_prompt_ns)
    return Latency(_percentile(every, 0.50), _percentile(every, 0.99),
                   _percentile(best, 0.50), _percentile(best, 0.99))


def report(scores: Scores, lat: Latency, split: str) -> str:
    """Plain-text report: accuracy, per-task precision/recall, confusion matrix, latency."""
    lines = [f"split={split}  prompts={scores.total}  accuracy={scores.accuracy:.1%}", "",
             f"{'task':<11} {'n':>4} {'precision':>10} {'recall':>7}"]
    for t in TASKS:
        lines.append(f"{t:<11} {sum(scores.confusion[t].values()):>4} "
                     f"{scores.precision(t):>10.1%} {scores.recall(t):>7.1%}")
    lines += ["", "confusion (rows = true, cols = predicted)",
              f"{'':<11}" + "".join(f"{p:>11}" for p in TASKS)]
    for t in TASKS:
        lines.append(f"{t:<11}" + "".join(f"{scores.confusion[t][p]:>11}" for p in TASKS))
    lines += ["", f"latency per request, all calls:         p50={lat.p50_us:.1f} us  "
                  f"p99={lat.p99_us:.1f} us",
              f"latency per request, best per prompt:   p50={lat.best_p50_us:.1f} us  "
              f"p99={lat.best_p99_us:.1f} us"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=SPLITS, default="test",
                        help="Prompts scored: dev (tuning), test (held out) or all.")
    parser.add_argument("--repeats", type=int, default=200,
                        help="Calls per prompt for the latency percentiles (at least 1).")
    parser.add_argument("--errors", action="store_true",
                        help="Also list every misclassified prompt (id, true -> predicted).")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: must be at least 1, got {args.repeats}")

    rows = load_prompts(args.split)
    scores = score(rows)
    print(report(scores, latency(rows, args.repeats), args.split))
    if args.errors:
        print("\nmisclassified:")
        for row in rows:
            predicted = classify_text(row["prompt"])
            if predicted != row["task"]:
                print(f"  {row['id']:<16} {row['task']:>10} -> {predicted:<10} "
                      f"{row['prompt'][:70]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
