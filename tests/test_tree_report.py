"""models.tree_report: the tree shapes compared at each budget (pure), and the chain walk against
`head_train.chain_acceptance` on the built lab (target + EAGLE-3 head, ~15 s)."""

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
from models.tree_report import describe, head_ranks, load_eagle3, prompts, trees

# Path frequencies where the top-1 chain dominates, as the lab's dev prompts gave.
FREQ = {(0,) * d: 0.8 ** d for d in range(1, 15)} | {(1,): 0.03, (1, 0): 0.02}  # below 0.8 ** 14


def test_every_shape_spends_the_budget_and_width_one_is_the_chain():
    for budget in (2, 4, 6, 8, 14):
        shapes = trees(budget, FREQ)
        assert shapes["chain"] == spec_tree.branching((1,) * budget)
        assert all(len(t) == budget for t in shapes.values()), budget
        assert all(spec_tree.validate(t) for t in shapes.values())
        assert shapes["calibrated"] == shapes["chain"]  # the chain is the most travelled path
    assert set(trees(4, FREQ)) == {"chain", "top2-chains", "calibrated"}
    assert set(trees(6, FREQ)) == {"chain", "top2-chains", "top2-full", "calibrated"}
    assert trees(14, FREQ)["top2-full"] == spec_tree.branching((2, 2, 2))


def test_describe_lists_nodes_by_depth_then_rank():
    assert describe(spec_tree.branching((2, 1))) == "[(0,), (1,), (0, 0), (1, 0)]"


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
