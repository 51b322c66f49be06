"""Benchmark workloads from the project's labeled prompts (`bench/prompts/tasks.jsonl`) and the
held-out mix the task classifier was never tuned on (`bench/prompts/heldout.jsonl`, built by
`python -m bench.heldout`).

A workload is a seeded, endless sequence of `Job`s (path, OpenAI body, task type). Sampling settings
per task type follow how each is used: code, math and extraction greedy (temperature 0), chat at
0.7, creative at 1.0 (the field's common defaults for those uses). Output lengths are drawn per
request, uniformly in [0.5, 1.5] × the task's mean (`MEAN_OUTPUT_TOKENS`), with `ignore_eos` so that
every configuration generates the same number of tokens for the same job.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

PROMPTS_PATH = Path(__file__).parent / "prompts" / "tasks.jsonl"
HELDOUT_PATH = PROMPTS_PATH.with_name("heldout.jsonl")
TEMPERATURE = {"code": 0.0, "math": 0.0, "extraction": 0.0, "chat": 0.7, "creative": 1.0}
MEAN_OUTPUT_TOKENS = {"code": 128, "math": 96, "extraction": 96, "chat": 128, "creative": 160}
WORKLOADS = ("code", "chat", "mixed", "heldout")


@dataclass(frozen=True, slots=True)
class Job:
    """One request of a workload: the endpoint path, its JSON body and the prompt's task type."""

    path: str
    body: dict
    task: str


def load_prompts(path: Path = PROMPTS_PATH) -> list[dict]:
    """The labeled prompts (`id`, `task`, `split`, `prompt`, `kind`)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def jobs(workload: str, model: str, seed: int = 0, route: str = "auto") -> Iterator[Job]:
    """Endless jobs of `workload` ("code": code completion prompts only; "chat": the chat and
    creative prompts; "mixed": every prompt; "heldout": every prompt of the held-out mix).

    Args:
        workload: one of WORKLOADS.
        model: the served model name.
        seed: the same seed gives the same sequence of jobs.
        route: the body's `route` field (specserve's extension; "auto" lets the router decide).

    Raises:
        ValueError: unknown workload.
    """
    prompts = load_prompts(HELDOUT_PATH if workload == "heldout" else PROMPTS_PATH)
    if workload == "code":
        prompts = [p for p in prompts if p["task"] == "code" and p["kind"] == "completion"]
    elif workload == "chat":
        prompts = [p for p in prompts if p["task"] in ("chat", "creative")]
    elif workload not in ("mixed", "heldout"):
        raise ValueError(f"workload: must be one of {WORKLOADS}, got {workload!r}")
    rng = random.Random(seed)
    while True:
        p = rng.choice(prompts)
        task = p["task"]
        body = {"model": model, "temperature": TEMPERATURE[task], "ignore_eos": True,
                "max_tokens": max(1, round(MEAN_OUTPUT_TOKENS[task] * rng.uniform(0.5, 1.5))),
                "route": route}
        if p["kind"] == "chat":
            yield Job("/v1/chat/completions",
                      {**body, "messages": [{"role": "user", "content": p["prompt"]}]}, task)
        else:
            yield Job("/v1/completions", {**body, "prompt": p["prompt"]}, task)
