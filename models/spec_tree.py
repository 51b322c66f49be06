"""Static draft trees and their greedy acceptance, as pure functions (no model, no torch).

A tree is the set of its nodes; a node is the tuple of ranks along its path from the root:
`(0,)` is the drafter's top-1 token after the last verified one, `(1,)` its second choice,
`(0, 2)` the third choice of the drafter run on top of `(0,)`. Each node is one draft token the
target verifies in its pass (tree attention: a node attends to the verified prefix and its own
ancestors), so the token budget per target pass is `len(tree)`. A chain of depth k is
`{(0,), (0, 0), ..., (0,)*k}`.

Greedy verification (temperature 0): the target accepts the longest root path whose tokens equal
its own argmax continuation, then adds one token of its own (the bonus token). With `ranks[j]` the
rank the drafter gave the target's token at draft position j + 1 (the drafter having been run on
the target's earlier tokens), that path is accepted to depth n iff `tuple(ranks[:n])` is a node.
The drafter's outputs off that path never change what is accepted, so ranks measured with teacher
forcing give a tree's exact greedy acceptance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Tree = frozenset[tuple[int, ...]]


def validate(tree: Tree) -> Tree:
    """Returns `tree` when it is non-empty and prefix-closed with ranks >= 0.

    Raises:
        ValueError: otherwise, naming the first offending node.
    """
    if not tree:
        raise ValueError("tree: empty")
    for node in tree:
        if not node or min(node) < 0:
            raise ValueError(f"tree: node {node} must be a non-empty tuple of ranks >= 0")
        if len(node) > 1 and node[:-1] not in tree:
            raise ValueError(f"tree: node {node} has no parent {node[:-1]}")
    return tree


def depth(tree: Tree) -> int:
    """Length of the longest root path."""
    return max(map(len, tree))


def chain(k: int) -> Tree:
    """The chain drafter of depth k: the top-1 token at every position."""
    if k < 1:
        raise ValueError(f"k: {k} must be >= 1")
    return frozenset((0,) * d for d in range(1, k + 1))


def branching(widths: Sequence[int]) -> Tree:
    """Every node at depth d has the drafter's top `widths[d]` tokens as children (top-k per depth).

    `branching((1,) * k)` is `chain(k)`; `(2, 1, 1)` is two chains of depth 3 from the root's top-2;
    `(2, 2)` is the full binary tree of depth 2. Nodes: Σ_d Π_{e<=d} widths[e].
    """
    if not widths or min(widths) < 1:
        raise ValueError(f"widths: {tuple(widths)} must be non-empty, each >= 1")
    level, nodes = [()], set()
    for w in widths:
        level = [p + (r,) for p in level for r in range(w)]
        nodes.update(level)
    return frozenset(nodes)


def accepted(ranks: Sequence[int], tree: Tree) -> int:
    """Draft tokens the target accepts: the largest n with tuple(ranks[:n]) in `tree`."""
    n = 0
    while n < len(ranks) and tuple(ranks[:n + 1]) in tree:
        n += 1
    return n


def path_frequencies(ranks: Sequence[Sequence[Sequence[int]]],
                     max_depth: int) -> dict[tuple[int, ...], float]:
    """P(node): the fraction of anchors whose target path runs through `node`, i.e. whose ranks
    at positions 1..len(node) equal it, for every node seen down to `max_depth`.

    Args:
        ranks: per row, per draft position j, the rank at each anchor (`walk`'s input); an anchor
            counts when it has a rank at every position down to `max_depth`.
        max_depth: deepest node counted (<= the positions given).
    """
    counts: dict[tuple[int, ...], int] = {}
    anchors = 0
    for row in ranks:
        for a in range(len(row[max_depth - 1])):
            anchors += 1
            path = tuple(row[j][a] for j in range(max_depth))
            for d in range(1, max_depth + 1):
                counts[path[:d]] = counts.get(path[:d], 0) + 1
    return {n: c / anchors for n, c in counts.items()}


def calibrated(budget: int, freq: Mapping[tuple[int, ...], float]) -> Tree:
    """The `budget`-node tree that would accept the most on the anchors `freq` was measured on
    (`path_frequencies`): Medusa's static sparse tree (Cai et al. 2024, §3.1.3), built from
    measured path frequencies instead of a product of per-position accuracies.

    Each pass accepts Σ_{nodes} [the target's path runs through the node] tokens, so
    E[accepted] = Σ_nodes P(node); P(child) <= P(parent), so the `budget` most frequent nodes
    (ties: shorter, then smaller ranks first) are optimal and prefix-closed.

    Raises:
        ValueError: budget < 1, or fewer than `budget` nodes were seen.
    """
    if budget < 1 or len(freq) < budget:
        raise ValueError(f"budget: {budget} must be >= 1 and <= the {len(freq)} nodes measured")
    ordered = sorted(freq, key=lambda n: (-freq[n], len(n), n))
    return validate(frozenset(ordered[:budget]))


def walk(ranks: Sequence[Sequence[Sequence[int]]], starts: Sequence[int], tree: Tree) -> dict:
    """Greedy speculative decoding of each row from its prompt with `tree`: with tokens < L
    verified, the drafter starts at anchor L - 2 (as in `models.head_train.chain_acceptance`), the
    target accepts `accepted(...)` tokens and adds its bonus token: L grows by accepted + 1.

    Args:
        ranks: per row, per draft position j (0-based, at least `depth(tree)` of them), the rank
            of the target's token at each anchor a = 0, 1, ...: the drafter at anchor a drafts
            token a + j + 2, the last verified token being a + 1.
        starts: each row's prompt length; the first verified length is start + 1 (prefill's
            token), so the first anchor is start - 1.
        tree: the draft tree.

    Returns:
        {"mean_acceptance_length": 1 + accepted / passes (tokens per target pass, bonus
        included), "passes": n, "accepted_per_depth": [count of passes accepting >= d + 1]}.
        Passes run while the anchor has a rank at every position given (not only down to
        depth(tree)), so trees of different depths fed the same ranks walk the same span.
    """
    k = depth(tree)
    if any(len(row) < k for row in ranks):
        raise ValueError(f"ranks: every row needs {k} draft positions for a tree of depth {k}")
    passes, total, per_depth = 0, 0, [0] * k
    for row, start in zip(ranks, starts, strict=True):
        length = start + 1
        while length - 2 < len(row[-1]):  # anchor length - 2 has every position given
            a = length - 2
            n = accepted([row[j][a] for j in range(k)], tree)
            passes += 1
            total += n
            for d in range(n):
                per_depth[d] += 1
            length += n + 1
    return {"mean_acceptance_length": round(1 + total / passes, 4) if passes else 1.0,
            "passes": passes, "accepted_per_depth": per_depth}
