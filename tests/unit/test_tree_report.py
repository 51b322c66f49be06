"""models.tree_report: the tree shapes compared at each budget (pure). The chain walk on the built
lab: tests/integration/test_tree_report_live.py."""

from __future__ import annotations

from models import spec_tree
from models.tree_report import describe, trees

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
