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

import itertools
import json
import random
from importlib import metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

PROMPTS_PATH = Path(__file__).parent / "prompts" / "tasks.jsonl"
HELDOUT_PATH = PROMPTS_PATH.with_name("heldout.jsonl")
TEMPERATURE = {"code": 0.0, "math": 0.0, "extraction": 0.0, "chat": 0.7, "creative": 1.0}
MEAN_OUTPUT_TOKENS = {"code": 128, "math": 96, "extraction": 96, "chat": 128, "creative": 160}
WORKLOADS = ("code", "chat", "mixed", "heldout")
# The long-prompt workload (`long_jobs`): its sources and the share of code completions in it.
LONG_PACKAGES = ("click", "httpx", "jinja2", "pydantic", "requests")
LONG_CODE_SHARE = 0.5
# Folders of a package that are not its own code (tests, vendored copies), skipped as a source.
SKIPPED_SOURCE_PARTS = frozenset({"tests", "testing", "_vendor", "__pycache__"})


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


def long_sources(packages=LONG_PACKAGES) -> list[tuple[str, str]]:
    """[(name, text)] of the installed packages' own `.py` files (sorted, tests and vendored code
    skipped), the held-out mix's sources (bench/heldout.py): code neither the classifier nor the
    model lab saw.

    Raises:
        importlib.metadata.PackageNotFoundError: a package is not installed.
    """
    out = []
    for name in packages:
        dist = metadata.distribution(name)
        for rel in sorted(str(f) for f in dist.files or () if str(f).endswith(".py")
                          and not SKIPPED_SOURCE_PARTS & set(Path(str(f)).parts)):
            text = Path(dist.locate_file(rel)).read_text(encoding="utf-8")
            if len(text) > 4000:
                out.append((f"{name} {dist.version}: {rel}", text))
    return out


def long_jobs(model: str, tokenizer, context_tokens: int, seed: int = 0, route: str = "auto",
              sources: list[tuple[str, str]] | None = None) -> Iterator[Job]:
    """Endless jobs whose prompts hold `context_tokens` tokens of real source code (a window of a
    file from `long_sources`, cut in the target's tokens): half code completions continuing the
    window (task code, greedy), half chat questions about it (task chat, temperature 0.7), output
    lengths as `jobs`. The long-context cell of the benchmark: a step reads
    `context_tokens` of KV per sequence, where the labeled prompts hold tens.

    Args:
        tokenizer: the target's tokenizer (Hugging Face API: `encode`, `decode`).
        context_tokens: prompt tokens per job (the chat template adds a few).
        sources: (name, text) pairs to cut from (default: `long_sources()`).

    Raises:
        ValueError: context_tokens < 1, or no source holds that many tokens.
    """
    if context_tokens < 1:
        raise ValueError(f"context_tokens must be at least 1, got {context_tokens}")
    encoded = [ids for _, text in (sources or long_sources())
               if len(ids := tokenizer.encode(text, add_special_tokens=False)) > context_tokens]
    if not encoded:
        raise ValueError(f"no source holds {context_tokens} tokens")
    rng = random.Random(seed)
    while True:
        ids = rng.choice(encoded)
        start = rng.randrange(len(ids) - context_tokens)
        window = tokenizer.decode(ids[start:start + context_tokens])
        task = "code" if rng.random() < LONG_CODE_SHARE else "chat"
        body = {"model": model, "temperature": TEMPERATURE[task], "ignore_eos": True,
                "max_tokens": max(1, round(MEAN_OUTPUT_TOKENS[task] * rng.uniform(0.5, 1.5))),
                "route": route}
        if task == "code":
            yield Job("/v1/completions", {**body, "prompt": window}, task)
        else:
            question = "What does this code do, and what would you change in it?"
            yield Job("/v1/chat/completions", {**body, "messages": [
                {"role": "user", "content": f"{window}\n\n{question}"}]}, task)


def vllm_custom_rows(workload: str, n: int, seed: int = 1) -> list[dict]:
    """The first `n` completion jobs of `workload` (chat-endpoint jobs skipped) as vLLM's custom
    benchmark dataset rows {"prompt", "output_tokens"}: what `vllm bench serve --dataset-name
    custom --custom-output-len -1 --skip-chat-template` sends to `/v1/completions`. With
    workload "code" and seed 1 these are the prompts and lengths of `bench.run`'s code@c1 cell.

    Raises:
        ValueError: unknown workload, or fewer than `n` completion jobs in its first 100·n
            (jobs for `/v1/chat/completions` are skipped: this dataset does not carry them).
    """
    rows: list[dict] = []
    for job in itertools.islice(jobs(workload, "-", seed), 100 * n):
        if len(rows) == n:
            break
        if job.path == "/v1/completions":
            rows.append({"prompt": job.body["prompt"], "output_tokens": job.body["max_tokens"]})
    if len(rows) < n:
        raise ValueError(f"workload: {workload!r} gave {len(rows)} completion prompts of the "
                         f"{n} asked in its first {100 * n} jobs (chat-endpoint jobs are skipped)")
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.workload --workload code -n 64 --out F`: writes vLLM's custom dataset."""
    import argparse

    p = argparse.ArgumentParser(description="Writes a workload's completion jobs as a JSONL file "
                                "for `vllm bench serve --dataset-name custom`.")
    p.add_argument("--workload", choices=WORKLOADS, default="code")
    p.add_argument("-n", "--num-prompts", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        rows = vllm_custom_rows(args.workload, args.num_prompts, args.seed)
    except ValueError as e:
        p.error(f"--{e}")
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(args.out)
    print(f"wrote {len(rows)} prompts to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
