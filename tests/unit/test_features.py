"""Request features read by the router, on vLLM's own request models."""

import pytest
from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest

from router.errors import RequestError
from router.request import last_user_text, prompt_tokens, request_features


def test_route_field_is_read_and_removed_before_the_engine_sees_it():
    body = CompletionRequest(model="m", prompt="def f(x):", route="vanilla")
    f = request_features(body)
    assert (f.requested_route, f.task) == ("vanilla", "code")
    assert "route" not in (body.model_extra or {})


def test_bad_route_is_a_400_naming_the_field():
    with pytest.raises(RequestError) as e:
        request_features(CompletionRequest(model="m", prompt="x", route="fast"))
    assert (e.value.status, e.value.param) == (400, "route")


def test_options_the_speculative_path_refuses():
    f = request_features(CompletionRequest(model="m", prompt="x", min_p=0.1, logit_bias={"5": 1}))
    assert f.unsupported_options == ("min_p", "logit_bias")
    assert request_features(CompletionRequest(model="m", prompt="x")).unsupported_options == ()


def test_temperature_defaults_to_openai_default():
    assert request_features(CompletionRequest(model="m", prompt="x")).temperature == 1.0
    assert request_features(CompletionRequest(model="m", prompt="x", temperature=0)).temperature == 0


def test_chat_uses_the_last_user_turn():
    body = ChatCompletionRequest(model="m", messages=[
        {"role": "user", "content": "Write a poem about the sea."},
        {"role": "assistant", "content": "Waves..."},
        {"role": "user", "content": [{"type": "text", "text": "Now solve 3x + 5 = 20."}]}])
    assert last_user_text(body) == "Now solve 3x + 5 = 20."
    assert request_features(body).task == "math"


def test_prompt_tokens_and_speculator_context():
    assert prompt_tokens(CompletionRequest(model="m", prompt=[1, 2, 3]), None) == 3
    assert prompt_tokens(CompletionRequest(model="m", prompt="x" * 400), None) == 100
    long = CompletionRequest(model="m", prompt="y" * 4000)
    assert request_features(long, None, speculator_context=512).beyond_speculator_context
    short = CompletionRequest(model="m", prompt="y" * 40)
    assert not request_features(short, None, speculator_context=512).beyond_speculator_context


def test_an_output_limit_of_one_token_has_no_decode_step():
    def one(**kw):
        return request_features(CompletionRequest(model="m", prompt="def f(x):", **kw))

    def chat(**kw):
        return request_features(ChatCompletionRequest(
            model="m", messages=[{"role": "user", "content": "hi"}], **kw))

    assert one(max_tokens=1).no_decode_step
    assert not one(max_tokens=2).no_decode_step and not one().no_decode_step
    assert chat(max_completion_tokens=1).no_decode_step
    assert chat(max_tokens=1).no_decode_step  # the deprecated field, as sent
    assert not chat(max_completion_tokens=8).no_decode_step
