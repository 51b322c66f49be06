"""What a batch run did: rows, tokens, route mix and acceptance per task type (`BatchStats`), and
its two reporters: a progress line every few seconds and the final summary (text and JSON).

Acceptance per task type is summed from each speculative response's
`metrics.speculative_decoding` (vLLM per-request metrics): acceptance rate = accepted draft tokens /
draft tokens; mean acceptance length = 1 + accepted / verification steps (../shared/DESIGN.md §2).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Acceptance:
    rows: int = 0
    steps: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0


@dataclass
class BatchStats:
    """Counts of one run (rows skipped because the output already had them are not run).

    Attributes:
        total: non-blank input lines.
        skipped: rows already in the output when the run started.
        ok: rows answered 2xx.
        failed: rows answered with an error status or refused before running (error rows).
        unfinished: rows that got no line (engine unavailable after retries, or interrupted).
    """

    total: int = 0
    skipped: int = 0
    ok: int = 0
    failed: int = 0
    unfinished: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    routes: Counter = field(default_factory=Counter)  # route -> rows
    reasons: Counter = field(default_factory=Counter)  # reason -> rows
    task_routes: dict[str, Counter] = field(default_factory=dict)  # task -> route -> rows
    acceptance: dict[str, _Acceptance] = field(default_factory=dict)  # task -> counts
    started_s: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        return self.skipped + self.ok + self.failed

    def observe_response(self, status_code: int, body: dict, route: str | None = None,
                         reason: str | None = None, task: str | None = None) -> None:
        """Counts one answered row (`body`: the response JSON; no route when the router refused
        the request itself)."""
        if status_code < 400:
            self.ok += 1
        else:
            self.failed += 1
        usage = body.get("usage") or {}
        self.prompt_tokens += usage.get("prompt_tokens") or 0
        self.completion_tokens += usage.get("completion_tokens") or 0
        if route is None:
            return
        self.routes[route] += 1
        self.reasons[reason] += 1
        self.task_routes.setdefault(task, Counter())[route] += 1
        spec = (body.get("metrics") or {}).get("speculative_decoding")
        if spec:
            a = self.acceptance.setdefault(task, _Acceptance())
            a.rows += 1
            a.steps += spec.get("num_spec_steps", 0)
            a.draft_tokens += spec.get("num_draft_tokens", 0)
            a.accepted_tokens += spec.get("num_accepted_draft_tokens", 0)

    def observe_error(self) -> None:
        """Counts one row refused before running."""
        self.failed += 1

    def to_dict(self) -> dict:
        """The summary as plain JSON types."""
        wall_s = time.monotonic() - self.started_s
        run = self.ok + self.failed
        return {
            "rows": {"total": self.total, "ok": self.ok, "failed": self.failed,
                     "skipped": self.skipped, "unfinished": self.unfinished},
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            "wall_s": round(wall_s, 2),
            "rows_per_s": round(run / wall_s, 3) if wall_s else 0.0,
            "completion_tok_per_s": round(self.completion_tokens / wall_s, 1) if wall_s else 0.0,
            "routes": dict(self.routes),
            "reasons": dict(self.reasons),
            "routes_by_task": {t: dict(c) for t, c in sorted(self.task_routes.items())},
            "acceptance_by_task": {
                t: {"rows": a.rows, "draft_tokens": a.draft_tokens,
                    "accepted_tokens": a.accepted_tokens,
                    "acceptance_rate": round(a.accepted_tokens / a.draft_tokens, 3)
                    if a.draft_tokens else None,
                    "mean_acceptance_length": round(1 + a.accepted_tokens / a.steps, 3)
                    if a.steps else None}
                for t, a in sorted(self.acceptance.items())},
        }


def progress_line(stats: BatchStats, in_flight: dict[str, int]) -> str:
    """`[  12s] 120/500 rows (ok 118, failed 2, skipped 0) | in flight v 40 s 24 | ...`."""
    d = stats.to_dict()
    routed = sum(stats.routes.values())
    mix = " ".join(f"{route} {100 * n / routed:.0f}%" for route, n in sorted(stats.routes.items())
                   ) if routed else "-"
    flying = " ".join(f"{pool} {n}" for pool, n in sorted(in_flight.items()))
    return (f"[{d['wall_s']:5.0f}s] {stats.done}/{stats.total} rows (ok {stats.ok}, failed "
            f"{stats.failed}, skipped {stats.skipped}) | in flight {flying} | "
            f"{d['rows_per_s']:.1f} rows/s {d['completion_tok_per_s']:.0f} tok/s | routes {mix}")


def summary_text(d: dict) -> str:
    """The final summary for the job log (the JSON follows it on one `summary:` line)."""
    rows, tokens = d["rows"], d["tokens"]
    lines = [
        f"rows: {rows['ok']} ok, {rows['failed']} failed, {rows['skipped']} skipped (already "
        f"done), {rows['unfinished']} unfinished, of {rows['total']}",
        f"tokens: {tokens['prompt']} prompt, {tokens['completion']} completion in "
        f"{d['wall_s']:.1f} s: {d['rows_per_s']:.2f} rows/s, {d['completion_tok_per_s']:.1f} tok/s",
        "routes: " + (", ".join(f"{r} {n}" for r, n in sorted(d["routes"].items())) or "-")
        + ("  (" + ", ".join(f"{r} {n}" for r, n in sorted(d["reasons"].items())) + ")"
           if d["reasons"] else ""),
    ]
    for task, routes in d["routes_by_task"].items():
        acc = d["acceptance_by_task"].get(task)
        accepted = (f"; acceptance {acc['acceptance_rate']}, mean acceptance length "
                    f"{acc['mean_acceptance_length']}" if acc and acc["draft_tokens"] else "")
        lines.append(f"  {task}: " + ", ".join(f"{r} {n}" for r, n in sorted(routes.items()))
                     + accepted)
    lines.append("summary: " + json.dumps(d, sort_keys=True))
    return "\n".join(lines)
