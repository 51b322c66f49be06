"""Task type of a request from its text: code, math, extraction, chat or creative.

A first cut: weighted regular-expression cues scored over the last user turn (or the prompt), highest
score wins, `chat` when nothing scores. Code and math accept far more draft tokens than open-ended
chat (repetitive structure, copied identifiers), extraction copies from its input (n-gram lookup
accepts it), creative writing at high temperature accepts least.
"""

from __future__ import annotations

import re

from cluster.config import TaskType

# (task, weight, pattern): each match adds `weight` to the task's score.
_CUES: list[tuple[TaskType, float, re.Pattern]] = [
    ("code", 3.0, re.compile(r"```|\bdef \w+\(|\bclass \w+[:(]|\bimport \w+|\breturn\b|#include|"
                             r"\bfunction\s*\w*\(|=>|\bconst \w+ =|\bSELECT\b.+\bFROM\b|;\s*$",
                             re.M)),
    ("code", 2.0, re.compile(r"\b(python|javascript|typescript|rust|golang|java|c\+\+|sql|bash|"
                             r"regex|function|method|compile|bug|stack ?trace|refactor|unit test|"
                             r"api|json|yaml|script)\b", re.I)),
    ("math", 3.0, re.compile(r"\d+\s*[-+*/^=]\s*\d+|\\frac|\\sum|\\int|\bx\^2|\$[^$]+\$")),
    ("math", 2.0, re.compile(r"\b(solve|equation|integral|derivative|prove|theorem|probability|"
                             r"calculate|compute|how many|sum of|product of|prime|matrix|"
                             r"arithmetic|percent(age)?)\b", re.I)),
    ("extraction", 3.0, re.compile(r"\b(summari[sz]e|summary|tl;?dr|extract|rewrite|rephrase|"
                                   r"paraphrase|translate|translation|copy|list all|find all|"
                                   r"convert .+ to|fix the grammar|proofread)\b", re.I)),
    ("creative", 3.0, re.compile(r"\b(poem|story|haiku|sonnet|lyrics|limerick|fiction|novel|"
                                 r"imagine|once upon|screenplay|fairy tale|creative)\b", re.I)),
    ("creative", 1.5, re.compile(r"\bwrite (me )?an? (short )?(tale|song|verse|scene)\b", re.I)),
]


def classify_text(text: str) -> TaskType:
    """Task type of `text` (the last user turn or the completion prompt); `chat` by default.

    Cost: a handful of regex scans over at most the last 4,000 characters (~10-50 µs).
    """
    text = text[-4000:]
    scores: dict[TaskType, float] = {}
    for task, weight, pattern in _CUES:
        hits = len(pattern.findall(text))
        if hits:
            scores[task] = scores.get(task, 0.0) + weight * min(hits, 5)
    return max(scores, key=scores.__getitem__) if scores else "chat"
