"""`describe_validation_error` (router/errors.py) on the real request models' validation errors:
a union field's error names the field and the member that was meant."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest

from router.errors import describe_validation_error

CHAT = [{"role": "user", "content": "hi"}]


def _errors(cls, **kw) -> list[dict]:
    with pytest.raises(ValidationError) as e:
        cls(model="m", **kw)
    return e.value.errors()


@pytest.mark.parametrize("cls, kw, param, message", [
    # a list of 10 strings is not a `str` (first error) and too long a `list[str]` (the one meant)
    (CompletionRequest, {"prompt": "x", "stop": ["a"] * 10}, "stop",
     "stop: List should have at most 4 items after validation, not 10"),
    (ChatCompletionRequest, {"messages": CHAT, "stop": ["a"] * 5}, "stop",
     "stop: List should have at most 4 items after validation, not 5"),
    (CompletionRequest, {"prompt": [1, -2]}, "prompt",
     "prompt[1]: Input should be greater than or equal to 0, got -2"),
    # token-id lists: the first error is "not a valid integer" for the flat-ids member
    (CompletionRequest, {"prompt": [[1, 2], [-1]]}, "prompt",
     "prompt[1][0]: Input should be greater than or equal to 0, got -1"),
    (CompletionRequest, {"prompt": 123}, "prompt", "prompt: Input should be a valid list"),
    (CompletionRequest, {"prompt": "x", "stop": 5}, "stop", "stop: Input should be a valid string"),
    (CompletionRequest, {"prompt": "x", "max_tokens": "ten"}, "max_tokens",
     "max_tokens: Input should be a valid integer, unable to parse string as an integer"),
])
def test_errors_name_the_field(cls, kw, param, message):
    assert describe_validation_error(_errors(cls, **kw)) == (param, message)


def test_no_errors_still_say_something():
    assert describe_validation_error([]) == (None, "invalid request")
