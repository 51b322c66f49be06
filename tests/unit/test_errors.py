"""`describe_validation_error` (router/errors.py) on the real request models' validation errors:
a union field's error names the field and the member that was meant; a body of another media
type than JSON gets vLLM's answer."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError
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


@pytest.mark.parametrize("content_type, status, message", [
    ("text/plain", 400, "Unsupported Media Type: Only 'application/json' is allowed"),
    ("application/x-www-form-urlencoded", 400,
     "Unsupported Media Type: Only 'application/json' is allowed"),
    ("application/json; charset=utf-8", 200, None),
    (None, 400, "Unsupported Media Type: Only 'application/json' is allowed"),
])
def test_a_body_that_is_not_json_gets_vllms_answer(content_type, status, message):
    """curl -d sends application/x-www-form-urlencoded: vLLM's server refuses it by media type,
    not with FastAPI's "Input should be a valid dictionary"."""
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from router.errors import install_error_handlers

    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/completions")
    async def completions(body: _Prompt) -> dict:
        return {"prompt": body.prompt}

    r = TestClient(app).post("/v1/completions", content=b'{"prompt": "x"}',
                             headers={"content-type": content_type} if content_type else {})
    assert r.status_code == status, r.text
    if message:
        assert r.json()["error"] == {"message": message, "type": "BadRequestError",
                                     "param": None, "code": 400}


class _Prompt(BaseModel):
    prompt: str


def test_an_engine_error_names_its_parameter():
    """vLLM's validation errors carry their field in the message; the error JSON's `param` too
    (Ray Serve LLM's ingress passes the message on and drops the field)."""
    from vllm.exceptions import VLLMValidationError

    from router.errors import engine_error_param

    message = str(VLLMValidationError("Requested sample logprobs of 100, which is greater than "
                                      "max allowed: 20", parameter="logprobs", value=100))
    assert engine_error_param(message) == "logprobs"
    assert engine_error_param(str(VLLMValidationError("no field"))) is None
    assert engine_error_param("The model has no parameter= here") is None
