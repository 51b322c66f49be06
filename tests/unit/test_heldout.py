"""The held-out benchmark mix (`bench/heldout.py`, `bench/prompts/heldout.jsonl`) and its workload.

The classifier's agreement with the mix's labels is printed (`pytest -s`) with a floor far below
the measured figure (0.95, 190 / 200, when the mix was built), against regressions only: the
labels come from the builder's templates, and the rules must not be tuned on this file.
"""

import itertools
import json
import re
from collections import Counter
from typing import get_args

import pytest

from bench.classifier import TASKS, score
from bench.heldout import COUNTS, PACKAGES, Package, build, read_package, render
from bench.workload import HELDOUT_PATH, MEAN_OUTPUT_TOKENS, PROMPTS_PATH, TEMPERATURE, jobs
from core import TaskType

HELDOUT_AGREEMENT_FLOOR = 0.6  # measured 0.95; chance (the largest task's share) is 0.215
FIELDS = ["id", "task", "split", "prompt", "kind", "source"]


def _rows(path=HELDOUT_PATH) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def packages() -> list[Package]:
    return [read_package(p) for p in PACKAGES]


def test_committed_mix_is_what_the_builder_writes(packages):
    installed = {p.name: p.version for p in packages}
    recorded = dict(re.findall(r"([A-Za-z][\w-]*) (\d+(?:\.\d+)+)",
                               " ".join(r["source"] for r in _rows())))
    if recorded != installed:
        pytest.skip(f"heldout.jsonl was built from {recorded}; this venv has {installed}")
    assert render(build(packages)) == HELDOUT_PATH.read_text(encoding="utf-8")


def test_mix_has_every_task_both_kinds_and_no_labeled_prompt():
    rows = _rows()
    assert all(list(r) == FIELDS and r["split"] == "heldout" for r in rows)
    assert Counter((r["task"], r["kind"]) for r in rows) == COUNTS
    assert {r["task"] for r in rows} == set(get_args(TaskType)) == set(TEMPERATURE)
    assert {r["kind"] for r in rows} == {"completion", "chat"}
    assert len({r["id"] for r in rows}) == len({r["prompt"] for r in rows}) == len(rows)
    assert not {r["prompt"] for r in rows} & {r["prompt"] for r in _rows(PROMPTS_PATH)}
    names = tuple(f"{p} " for p in ("click", "httpx", "Jinja2", "prometheus_client", "pydantic",
                                    "PyYAML", "requests", "tqdm"))
    assert all(r["source"].startswith(names + ("template ",)) for r in rows)


def test_build_needs_enough_distinct_prompts(packages):
    thin = [Package("thin", "1.0", "MIT", "Name: thin", 1, packages[0].functions[:1],
                    packages[0].module_docs, ("bucket",))]
    with pytest.raises(ValueError, match="code/completion"):
        build(thin)


def test_heldout_workload_draws_the_mix_with_the_task_rules():
    a = [j.body for j in itertools.islice(jobs("heldout", "m", seed=5), 300)]
    assert a == [j.body for j in itertools.islice(jobs("heldout", "m", seed=5), 300)]
    got = list(itertools.islice(jobs("heldout", "m", seed=5, route="speculative"), 300))
    heldout = {r["prompt"]: r for r in _rows()}
    assert {j.task for j in got} == set(TEMPERATURE)
    for j in got:
        text = j.body["messages"][-1]["content"] if "messages" in j.body else j.body["prompt"]
        row = heldout[text]
        assert j.task == row["task"]
        assert j.path == ("/v1/chat/completions" if row["kind"] == "chat" else "/v1/completions")
        assert j.body["temperature"] == TEMPERATURE[j.task]
        assert j.body["ignore_eos"] is True and j.body["route"] == "speculative"
        assert 0.5 * MEAN_OUTPUT_TOKENS[j.task] - 1 <= j.body["max_tokens"] \
            <= 1.5 * MEAN_OUTPUT_TOKENS[j.task] + 1


def test_classifier_agreement_on_the_mix():
    scores = score(_rows())
    per_task = {t: f"{scores.recall(t):.0%}" for t in TASKS}
    print(f"\nheld-out agreement {scores.accuracy:.1%} of {scores.total}; per task {per_task}")
    assert scores.accuracy >= HELDOUT_AGREEMENT_FLOOR
