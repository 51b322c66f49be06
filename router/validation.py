"""Checks a completion or chat request at the ingress, before it reaches a pool.

vLLM validates most fields again in the pool replica; checking here means a bad request costs no
trip to a pool, never counts as load, and gets the same OpenAI error JSON on either path. Bounds
come from the engine's own limits (`max_model_len`, the target's vocabulary) and the OpenAI API
(temperature 0..2, top_p in (0, 1]).
"""

from __future__ import annotations

from dataclasses import dataclass

from router.errors import RequestError

MAX_TEMPERATURE = 2.0  # OpenAI API bound
UNSUPPORTED = {
    "use_beam_search": "beam search is not served (it bypasses the router's pools' batching)",
    "prompt_embeds": "prompt embeddings are not served",
}


@dataclass(frozen=True, slots=True)
class Limits:
    """What the engines accept.

    Attributes:
        max_model_len: context of the target engine in tokens (prompt + output).
        vocab_size: token ids must be in [0, vocab_size) (None: only >= 0 is checked).
        max_n: most choices one request may ask for (`n`).
        max_sequences: most sequences one request may start (`request_sequences`).
    """

    max_model_len: int
    vocab_size: int | None
    max_n: int
    max_sequences: int


def request_sequences(body) -> int:
    """Sequences a request starts in the engine: prompts × n (a chat, or a single prompt, is one
    prompt; a list of strings or of token-id lists is one prompt per item)."""
    n = 1 if body.n is None else body.n
    prompt = None if getattr(body, "messages", None) is not None else body.prompt
    if isinstance(prompt, list) and prompt and not all(isinstance(t, int) for t in prompt):
        return len(prompt) * n
    return n


def validate_request(body, prompt_len: int, limits: Limits) -> None:
    """Refuses a request the engine could not serve as asked.

    Args:
        body: a Ray Serve LLM CompletionRequest or ChatCompletionRequest (duck-typed).
        prompt_len: the prompt's length in target tokens (a chat: its messages' text).
        limits: the engine's limits.

    Raises:
        RequestError: 400 naming the field.
    """
    chat = getattr(body, "messages", None) is not None
    if not chat:
        _check_prompt(body.prompt, limits.vocab_size)
    for name, why in UNSUPPORTED.items():
        if getattr(body, name, None):
            raise RequestError(400, f"{name}: {why}", name)
    if body.temperature is not None and not 0 <= body.temperature <= MAX_TEMPERATURE:
        raise RequestError(400, f"temperature: must be in [0, {MAX_TEMPERATURE:g}], got "
                           f"{body.temperature}", "temperature")
    if body.top_p is not None and not 0 < body.top_p <= 1:
        raise RequestError(400, f"top_p: must be in (0, 1], got {body.top_p}", "top_p")
    n = 1 if body.n is None else body.n
    if not 1 <= n <= limits.max_n:
        raise RequestError(400, f"n: must be in [1, {limits.max_n}], got {n}", "n")
    sequences = request_sequences(body)
    if sequences > limits.max_sequences:
        where = "n" if chat else "prompt"  # a chat has one prompt: only n multiplies
        raise RequestError(400, f"{where}: {sequences // n} prompt(s) x n={n} ask for {sequences} "
                           f"sequences; at most {limits.max_sequences} per request", where)
    if body.stream_options is not None and not body.stream:
        raise RequestError(400, "stream_options: only allowed with stream: true", "stream_options")
    field = "max_completion_tokens" if chat and body.max_completion_tokens is not None \
        else "max_tokens"
    max_tokens = getattr(body, field)
    if max_tokens is not None and max_tokens < 1:
        raise RequestError(400, f"{field}: must be at least 1, got {max_tokens}", field)
    if prompt_len >= limits.max_model_len:
        where = "messages" if chat else "prompt"
        raise RequestError(400, f"{where}: {prompt_len} tokens leave no room for output in the "
                           f"model's context of {limits.max_model_len} tokens", where)
    if max_tokens is not None and prompt_len + max_tokens > limits.max_model_len:
        raise RequestError(400, f"{field}: {max_tokens} output tokens + {prompt_len} prompt tokens "
                           f"exceed the model's context of {limits.max_model_len} tokens; ask for "
                           f"at most {limits.max_model_len - prompt_len}", field)


def _check_prompt(prompt, vocab_size: int | None) -> None:
    """A string, a list of strings, a list of token ids or a list of token-id lists, non-empty."""
    if prompt is None or prompt == "" or prompt == []:
        raise RequestError(400, "prompt: must not be empty", "prompt")
    if isinstance(prompt, str):
        return
    if all(isinstance(p, str) for p in prompt):
        if any(p == "" for p in prompt):
            raise RequestError(400, "prompt: must not contain an empty string", "prompt")
        return
    lists = [prompt] if all(isinstance(t, int) for t in prompt) else prompt
    for ids in lists:
        if not ids:
            raise RequestError(400, "prompt: must not contain an empty token list", "prompt")
        if min(ids) < 0:
            raise RequestError(400, f"prompt: token id {min(ids)} is negative; ids are "
                               f"0..{'vocab_size - 1' if vocab_size is None else vocab_size - 1}",
                               "prompt")
        if vocab_size is not None and max(ids) >= vocab_size:
            raise RequestError(400, f"prompt: token id {max(ids)} is outside the vocabulary "
                               f"(0..{vocab_size - 1})", "prompt")
