"""models.tree_report on the built lab: the chain walk against `head_train.chain_acceptance`
(target + EAGLE-3 head, ~15 s). The tree shapes (pure): tests/unit/test_tree_report.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models import spec_tree
from models.distill import continue_tokens
from models.head_data import target_features
from models.head_lab import load_target
from models.head_train import chain_acceptance
from models.speculators_report import token_prompts
from models.tree_report import head_ranks, load_eagle3, prompts


def test_chain_walk_counts_as_chain_acceptance(lab):
    """On the built target and EAGLE-3 head, the chain tree's walk over teacher-forced ranks gives
    what `head_train.chain_acceptance` (vLLM's count, checked against vLLM) gives."""
    models = Path(lab)
    if not (models / "eagle3" / "model.safetensors").is_file():
        pytest.skip("no built EAGLE-3 head (python -m models.heads)")
    target = load_target(models)
    head = load_eagle3(models, target)
    rows = prompts("test", 1)[:2]
    for prompt in token_prompts(models / "target", rows):
        ranks = head_ranks(target, head, prompt, 32, 4)
        ids = continue_tokens(target, torch.tensor([prompt]), 32, 0.0)
        data = target_features(target, ids, head.aux_layer_ids)
        with torch.no_grad():
            want = chain_acceptance(head.unrolled(data.aux, ids, 4), target, data, len(prompt))
        got = spec_tree.walk([ranks], [len(prompt)], spec_tree.chain(4))
        assert (got["mean_acceptance_length"], got["passes"]) == (
            want["mean_acceptance_length"], want["drafts"])
