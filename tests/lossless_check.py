"""The lossless check's design and inputs, shared by its engine-level (tests/integration/
test_lossless.py) and HTTP (tests/e2e/test_lossless_http.py) variants: DEPTH tokens per sampled
continuation, the family of tests at level 0.01 (each at 0.01 / FAMILY_SIZE, Bonferroni), and the
target checkpoint, its encoded prompts and its exact model as module fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.lossless import METHODS, PROMPTS, SETTINGS, encode, load_target

DEPTH = 4
FAMILY_SIZE = len(METHODS) * len(PROMPTS) * len(SETTINGS)
ALPHA = 0.01 / FAMILY_SIZE


@pytest.fixture(scope="module")
def target(lab) -> Path:
    return Path(lab) / "target"


@pytest.fixture(scope="module")
def prompt_ids(target) -> list[list[int]]:
    return encode(target)


@pytest.fixture(scope="module")
def model(target):
    return load_target(target)
