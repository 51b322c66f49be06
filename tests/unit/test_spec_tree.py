"""models.spec_tree: static draft trees and their greedy acceptance (pure, no model)."""

from __future__ import annotations

import pytest

from models import spec_tree


def test_width_one_tree_is_the_chain():
    assert spec_tree.branching((1,) * 5) == spec_tree.chain(5)
    assert len(spec_tree.branching((2, 2))) == 6
    assert spec_tree.branching((2, 1, 1)) == {(0,), (1,), (0, 0), (1, 0), (0, 0, 0), (1, 0, 0)}


def test_accepted_is_the_longest_path_in_the_tree():
    tree = spec_tree.branching((2, 1, 1))
    assert spec_tree.accepted([0, 0, 0], tree) == 3
    assert spec_tree.accepted([1, 0, 5], tree) == 2   # second choice, then greedy, then a miss
    assert spec_tree.accepted([0, 1, 0], tree) == 1   # no second choice below depth 1
    assert spec_tree.accepted([3, 0, 0], tree) == 0
    assert spec_tree.accepted([0, 1, 0], spec_tree.chain(3)) == 1


# Two rows, 3 draft positions; rank at position j of anchor a. Prompt length 2: first anchor 1.
RANKS = [[[9, 0, 0, 1, 0, 0, 0, 0], [9, 0, 0, 0, 0, 0, 0], [9, 1, 0, 0, 0, 0]],
         [[0, 1, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]]


def test_walk_of_the_chain_by_hand():
    # Row 0, chain of 3: anchor 1 ranks (0, 0, 1) -> 2 accepted, L 3 -> 6; anchor 4 (0, 0, 0)
    # -> 3, L 6 -> 10; anchor 8 has no position 3: stop. Row 1: anchor 1 (1, ...) -> 0, L 3 -> 4;
    # anchor 2 (0, 0, 0) -> 3, L -> 8; anchor 6 is past position 3's 6 anchors: stop.
    res = spec_tree.walk(RANKS, [2, 2], spec_tree.chain(3))
    assert res == {"mean_acceptance_length": 1 + 8 / 4, "passes": 4,
                   "accepted_per_depth": [3, 3, 2]}


def test_width_one_walk_equals_chain_walk_and_a_wider_tree_accepts_more():
    chain = spec_tree.walk(RANKS, [2, 2], spec_tree.chain(3))
    assert spec_tree.walk(RANKS, [2, 2], spec_tree.branching((1, 1, 1))) == chain
    wider = spec_tree.walk(RANKS, [2, 2], spec_tree.branching((2, 2, 2)))
    assert wider["mean_acceptance_length"] > chain["mean_acceptance_length"]


def test_calibrated_tree_takes_the_most_travelled_paths():
    # Every anchor's path is top-1 all the way: the calibrated tree is the chain.
    top1 = [[[0] * 6, [0] * 5, [0] * 4]]
    assert spec_tree.calibrated(3, spec_tree.path_frequencies(top1, 3)) == spec_tree.chain(3)
    # Position 1 is the second choice at 2 of 4 anchors, then top-1: two chains of depth 2.
    split = [[[0, 1, 0, 1], [0, 0, 0, 0]]]
    freq = spec_tree.path_frequencies(split, 2)
    assert freq == {(0,): 0.5, (1,): 0.5, (0, 0): 0.5, (1, 0): 0.5}
    assert spec_tree.calibrated(4, freq) == spec_tree.branching((2, 1))
    assert spec_tree.calibrated(2, freq) == {(0,), (1,)}
    with pytest.raises(ValueError, match="nodes measured"):
        spec_tree.calibrated(5, freq)


def test_path_frequencies_count_complete_anchors_and_validation():
    freq = spec_tree.path_frequencies(RANKS, 3)
    # Row 0 has 6 anchors with 3 positions, row 1 too: 12; (0,) at 4 of each row's.
    assert freq[(0,)] == 8 / 12 and freq[(0, 0, 0)] == 7 / 12
    with pytest.raises(ValueError, match="no parent"):
        spec_tree.validate(frozenset({(0,), (1, 0)}))
    with pytest.raises(ValueError, match="draft positions"):
        spec_tree.walk([[[0], [0]]], [2], spec_tree.chain(3))
