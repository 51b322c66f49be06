"""models.spec_metrics: vLLM spec-decode counters to per-position acceptance (DESIGN.md §2)."""

from models.spec_metrics import add, alphas, mean_acceptance_length, minus


def test_alphas_are_conditional_per_position():
    c = {"num_drafts": 10, "num_accepted_tokens": 12, "num_accepted_tokens_per_pos": [8, 4, 0]}
    assert alphas(c) == [0.8, 0.5, 0.0]
    assert mean_acceptance_length(c) == 2.2


def test_nothing_drafted_means_length_one():
    assert mean_acceptance_length({}) == 1.0
    assert alphas({"num_drafts": 0, "num_accepted_tokens_per_pos": [0, 0]}) == [0.0, 0.0]


def test_minus_and_add_are_elementwise():
    before = {"num_drafts": 2, "num_accepted_tokens_per_pos": [1, 0]}
    after = {"num_drafts": 5, "num_accepted_tokens_per_pos": [3, 1]}
    delta = minus(after, before)
    assert delta == {"num_drafts": 3, "num_accepted_tokens_per_pos": [2, 1]}
    assert add(delta, before) == after
