"""Request features read by the router, against the lab's target tokenizer: the cheap byte bound
never undercounts (the pure rest: tests/unit/test_features.py)."""

from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest

from router.request import prompt_tokens


def test_byte_bound_never_undercounts_the_target_tokenizer(lab):
    """The cheap bound lets the router skip tokenizing short prompts: it must never be below the
    real count, or a prompt beyond the speculator's context would be missed (case #9)."""
    from pathlib import Path

    from bench.workload import load_prompts
    from router.request import load_tokenizer, max_prompt_tokens

    tokenizer = load_tokenizer(str(Path(lab) / "target"))
    for p in load_prompts():
        for body in (CompletionRequest(model="m", prompt=p["prompt"]),
                     ChatCompletionRequest(model="m", messages=[
                         {"role": "user", "content": p["prompt"]}])):
            assert max_prompt_tokens(body) >= prompt_tokens(body, tokenizer), p["id"]
    ids = CompletionRequest(model="m", prompt=[5, 6, 7])
    assert max_prompt_tokens(ids) == prompt_tokens(ids, tokenizer) == 3
