"""vLLM speculative-decoding counters → per-position acceptance and mean acceptance length.

From vLLM's `vllm:spec_decode_num_drafts`, `..._num_accepted_tokens` and
`..._num_accepted_tokens_per_pos` (../shared/DESIGN.md §2):
α_j by `core.stats.per_position_acceptance` (conditional acceptance at position j);
mean acceptance length = 1 + accepted / drafts (tokens per target step, bonus token included).
"""

from __future__ import annotations

from core.stats import per_position_acceptance

SPEC_PREFIX = "vllm:spec_decode_"


def read_counters(metrics) -> dict:
    """{short name: value} of the spec-decode counters in `LLM.get_metrics()`'s list; vectors
    (per-position counts) become lists."""
    out = {}
    for m in metrics:
        if not m.name.startswith(SPEC_PREFIX):
            continue
        name = m.name[len(SPEC_PREFIX):]
        if hasattr(m, "values"):  # Vector: one count per draft position
            out[name] = list(m.values)
        elif hasattr(m, "value"):  # Counter
            out[name] = m.value
    return out


def minus(after: dict, before: dict) -> dict:
    """Counter differences; per-position lists are subtracted element-wise."""
    out = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, list):
            out[key] = [a - b for a, b in zip(value, old or [0] * len(value))]
        else:
            out[key] = value - (old or 0)
    return out


def add(a: dict, b: dict) -> dict:
    """Counter sums; per-position lists are added element-wise (the longer list wins in length)."""
    out = dict(a)
    for key, value in b.items():
        old = out.get(key)
        if isinstance(value, list):
            old = old or []
            n = max(len(old), len(value))
            out[key] = [(old[i] if i < len(old) else 0) + (value[i] if i < len(value) else 0)
                        for i in range(n)]
        else:
            out[key] = (old or 0) + value
    return out


def alphas(counters: dict) -> list[float]:
    """Conditional acceptance per draft position α_1..α_k (0 where nothing reached it)."""
    return per_position_acceptance(counters.get("num_drafts", 0),
                                   counters.get("num_accepted_tokens_per_pos") or [])


def mean_acceptance_length(counters: dict) -> float:
    """1 + accepted / drafts; 1.0 when nothing was drafted."""
    drafts = counters.get("num_drafts", 0)
    return 1 + counters.get("num_accepted_tokens", 0) / drafts if drafts else 1.0
