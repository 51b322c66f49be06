"""`validate_request` on real request models: each refusal names its field (400).

(vLLM's request models themselves refuse an empty prompt and stream_options without stream at
parse time; tests/e2e/test_reliability.py checks those through HTTP.)"""

from __future__ import annotations

import pytest
from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest

from router.errors import RequestError
from router.request import Limits, request_sequences, validate_request

LIMITS = Limits(max_model_len=1024, vocab_size=4096, max_n=8, max_sequences=16)


def _completion(**kw):
    return CompletionRequest(model="m", **{"prompt": "x", **kw})


@pytest.mark.parametrize("kw, prompt_len, param", [
    ({"max_tokens": 0}, 1, "max_tokens"),
    ({"max_tokens": 1024}, 1, "max_tokens"),            # 1 + 1024 > 1024
    ({"max_tokens": 1}, 1024, "prompt"),                # the prompt fills the context
    ({"temperature": -0.1}, 1, "temperature"),
    ({"temperature": 2.01}, 1, "temperature"),
    ({"top_p": 0.0}, 1, "top_p"),
    ({"top_p": 1.01}, 1, "top_p"),
    ({"n": 0}, 1, "n"),
    ({"n": 9}, 1, "n"),
    ({"prompt": []}, 0, "prompt"),
    ({"prompt": ["a", ""]}, 1, "prompt"),
    ({"prompt": [[1, 2], []]}, 2, "prompt"),
    ({"prompt": [1, 4096]}, 2, "prompt"),               # ids are 0..4095
    ({"prompt": [[1], [4096]]}, 1, "prompt"),
    ({"use_beam_search": True}, 1, "use_beam_search"),
    ({"prompt": ["x"] * 17}, 17, "prompt"),             # 17 sequences, at most 16
    ({"prompt": ["x"] * 3, "n": 6}, 3, "prompt"),       # 3 prompts x n=6
    ({"prompt": [[1]] * 9, "n": 2}, 9, "prompt"),
])
def test_refusals_name_the_field(kw, prompt_len, param):
    with pytest.raises(RequestError) as e:
        validate_request(_completion(**kw), prompt_len, LIMITS)
    assert (e.value.status, e.value.param) == (400, param)


@pytest.mark.parametrize("kw, prompt_len", [
    ({"max_tokens": 1023}, 1),                          # exactly fills the context
    ({"max_tokens": None}, 10),
    ({"temperature": 0, "top_p": 1, "n": 8}, 1),
    ({"temperature": 2.0, "stream": True, "stream_options": {"include_usage": True}}, 1),
    ({"prompt": ["a", "b"]}, 1),
    ({"prompt": [0, 4095]}, 2),
    ({"prompt": [[1, 2], [3]]}, 2),
    ({"prompt": ["x"] * 16}, 16),
    ({"prompt": ["x"] * 2, "n": 8}, 2),
    ({"prompt": list(range(100)), "n": 8}, 100),        # one token-id prompt
])
def test_valid_requests_pass(kw, prompt_len):
    validate_request(_completion(**kw), prompt_len, LIMITS)


@pytest.mark.parametrize("prompt, n, sequences", [
    ("x", 3, 3), (["a", "b"], 3, 6), ([1, 2, 3], 2, 2), ([[1], [2], [3]], 1, 3), (["a"], 1, 1),
])
def test_request_sequences(prompt, n, sequences):
    assert request_sequences(_completion(prompt=prompt, n=n)) == sequences


def test_a_chat_is_one_prompt():
    chat = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], n=3)
    assert request_sequences(chat) == 3


class _Body:
    """A request as validate_request reads it, for prompts vLLM's own model refuses at parse time
    (negative ids): the check stands on its own for any caller."""

    def __init__(self, prompt):
        self.prompt, self.n, self.temperature, self.top_p = prompt, 1, None, None
        self.stream, self.stream_options, self.max_tokens = False, None, 1


@pytest.mark.parametrize("prompt", [[1, -2], [[1, 2], [-1]], [-1]])
def test_negative_token_ids_are_refused(prompt):
    with pytest.raises(RequestError) as e:
        validate_request(_Body(prompt), 2, LIMITS)
    assert (e.value.status, e.value.param) == (400, "prompt")
    assert "negative" in e.value.message and "0..4095" in e.value.message


def test_chat_bounds_max_completion_tokens_against_the_context():
    chat = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                 max_completion_tokens=1020)
    with pytest.raises(RequestError) as e:
        validate_request(chat, 5, LIMITS)
    assert e.value.param == "max_completion_tokens"
    assert "at most 1019" in e.value.message
    validate_request(chat, 4, LIMITS)


def test_chat_max_tokens_is_read_without_its_deprecation_warning():
    """vLLM deprecates chat's `max_tokens` (a warning per read); the OpenAI API still takes it,
    and the router reads it as sent, silently, for every chat request."""
    import warnings

    from router.request import max_tokens

    chat = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                 max_tokens=1020)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(RequestError) as e:
            validate_request(chat, 5, LIMITS)
        assert max_tokens(chat) == 1020
    assert e.value.param == "max_tokens" and "at most 1019" in e.value.message
    with pytest.warns(DeprecationWarning):  # what the router no longer does
        chat.max_tokens
