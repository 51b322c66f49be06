"""What the router reads off a request, read once: `RequestParser.parse(body) -> ParsedRequest`.

One pass over a CompletionRequest or ChatCompletionRequest (vLLM's pydantic models) checks it
(`validate_request`), pops the `route` extension field, classifies its task (router/classify.py),
and counts its prompt tokens and the sequences it starts. The ingress and the batch driver both
parse here, then route the result (router/decider.py), so a batch row and an HTTP request agree
on what is valid and how it is routed.

Validation at the ingress means a bad request costs no trip to a pool, never counts as load, and
gets the same OpenAI error JSON on either path; vLLM validates most fields again in the pool
replica. Bounds come from the engine's own limits (`max_model_len`, the target's vocabulary) and
the OpenAI API (temperature 0..2, top_p in (0, 1]).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from tokenizers import Tokenizer

from router.classify import classify_text
from router.errors import RequestError
from router.policy import RequestedRoute, RequestFeatures

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


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A request as the router routes it, parsed once.

    Attributes:
        body: the request model, validated, its `route` field removed (what the pool receives).
        features: task, temperature, requested route and options (`RequestFeatures`).
        prompt_len: the prompt's tokens, or an upper bound within every limit (`parse`).
        sequences: sequences it starts in the engine (`request_sequences`: prompts × n).
        max_tokens: its output-token limit (`max_completion_tokens` or `max_tokens`); None when
            unset (the engine's limit applies).
    """

    body: Any
    features: RequestFeatures
    prompt_len: int
    sequences: int
    max_tokens: int | None


# Prompts up to this many bytes are not tokenized to estimate their context (`context_tokens`).
SHORT_PROMPT_BYTES = 512


class RequestParser:
    """Parses requests against one application's limits.

    Args:
        limits: what the engines accept.
        tokenizer: the target's tokenizer (None: characters / 4 stand in for tokens).
        speculator_context: tokens of context the speculator drafts within (None: unbounded, or
            no speculative pool).
    """

    def __init__(self, limits: Limits, tokenizer: Tokenizer | None = None,
                 speculator_context: int | None = None):
        self.limits, self.tokenizer = limits, tokenizer
        self.speculator_context = speculator_context

    def prompt_len(self, body, bound: int | None = None) -> int:
        """The prompt's length in target tokens where a limit depends on it, else a byte bound
        (`max_prompt_tokens`, or `bound` when the caller has it) already within every limit:
        short prompts, the common case, skip the tokenizer."""
        bound = max_prompt_tokens(body) if bound is None else bound
        context = self.speculator_context
        if bound + (max_tokens(body) or 1) <= self.limits.max_model_len and (
                context is None or bound < context):
            return bound
        return prompt_tokens(body, self.tokenizer)

    def parse(self, body) -> ParsedRequest:
        """Validates `body` and reads what the route decision needs off it; pops its `route`
        field so it does not travel to the engine.

        Args:
            body: an OpenAI CompletionRequest or ChatCompletionRequest (vLLM's pydantic models).

        Raises:
            RequestError: 400 naming the field (`validate_request`, or a `route` other than
                auto / speculative / vanilla).
        """
        bound = max_prompt_tokens(body)
        prompt_len = self.prompt_len(body, bound)
        validate_request(body, prompt_len, self.limits)
        features = request_features(body, self.tokenizer, self.speculator_context, prompt_len)
        limit = max_tokens(body)
        features = dataclasses.replace(features, context_tokens=self.context_tokens(
            body, prompt_len, limit, bound))
        return ParsedRequest(body, features, prompt_len, request_sequences(body), limit)

    def context_tokens(self, body, prompt_len: int, limit: int | None,
                       bound: int | None = None) -> int:
        """The mean context a sequence of this request holds while it decodes: its prompt's
        tokens plus half its output limit (`limit`, else what max_model_len leaves), for the
        step-time model's context term (core/step_time.py).

        `prompt_len` is exact once tokenized (below the byte bound); else a prompt of at most
        `SHORT_PROMPT_BYTES` counts bytes / 4 (BPE's rule of thumb, as `prompt_tokens` without a
        tokenizer), and a longer one is tokenized (~10 µs per 1,000 characters). `bound`: the
        prompt's `max_prompt_tokens` when the caller has it."""
        bound = max_prompt_tokens(body) if bound is None else bound
        if prompt_len < bound:
            tokens = prompt_len
        elif bound <= SHORT_PROMPT_BYTES:
            tokens = math.ceil(bound / 4)
        else:
            tokens = prompt_tokens(body, self.tokenizer)
        out = limit if limit is not None else max(self.limits.max_model_len - tokens, 0)
        return tokens + out // 2


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
    max_tokens = _field(body, field)
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


def max_tokens(body) -> int | None:
    """The request's output-token limit: `max_completion_tokens` (chat) or `max_tokens`; None
    when unset (the engine's limit applies)."""
    return getattr(body, "max_completion_tokens", None) or _field(body, "max_tokens")


def _field(body, name: str):
    """A request model's field as sent, read without its deprecation warning: vLLM marks chat's
    `max_tokens` deprecated in favour of `max_completion_tokens` (a pydantic descriptor that
    warns on every attribute read) while the OpenAI API still accepts it. A pydantic model keeps
    its field values in the instance dict; any other body is read as an attribute. (vLLM's own
    chat path still reads it, in the pool replica's process.)"""
    stored = vars(body)
    return stored[name] if name in stored else getattr(body, name, None)


def load_tokenizer(model_path: str) -> Tokenizer | None:
    """The target's fast tokenizer (`tokenizer.json`), or None when the folder has none."""
    path = Path(model_path) / "tokenizer.json"
    return Tokenizer.from_file(str(path)) if path.is_file() else None


def request_features(body, tokenizer: Tokenizer | None = None,
                     speculator_context: int | None = None,
                     prompt_len: int | None = None) -> RequestFeatures:
    """Features of a CompletionRequest or ChatCompletionRequest.

    Pops the `route` extension field so it does not travel to the engine. Counts prompt tokens
    (unless given as `prompt_len`) only when the speculator's context is bounded (a tokenizer pass
    costs ~10 µs per 1,000 chars).

    Raises:
        RequestError: `route` is not one of auto/speculative/vanilla (400).
    """
    extra = body.model_extra if body.model_extra is not None else {}
    requested = extra.pop("route", "auto")
    if requested not in get_args(RequestedRoute):
        raise RequestError(400, f"route: must be one of {list(get_args(RequestedRoute))}, got "
                           f"{requested!r}", "route")
    unsupported = tuple(name for name, on in (("min_p", bool(body.min_p)),
                                              ("logit_bias", bool(body.logit_bias))) if on)
    temperature = 1.0 if body.temperature is None else body.temperature
    beyond = False
    if speculator_context is not None:
        if prompt_len is None and max_prompt_tokens(body) >= speculator_context:
            prompt_len = prompt_tokens(body, tokenizer)
        beyond = prompt_len is not None and prompt_len >= speculator_context
    return RequestFeatures(task=classify_text(last_user_text(body)), temperature=temperature,
                           requested_route=requested, unsupported_options=unsupported,
                           beyond_speculator_context=beyond,
                           no_decode_step=max_tokens(body) == 1)


def last_user_text(body) -> str:
    """The completion prompt, or the last user turn of a chat ('' for token-id prompts)."""
    messages = getattr(body, "messages", None)
    if messages is not None:
        for msg in reversed(messages):
            msg = msg if isinstance(msg, dict) else msg.model_dump()
            if msg.get("role") == "user":
                return _content_text(msg.get("content"))
        return ""
    prompt = body.prompt
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return "\n".join(prompt)
    return ""


def max_prompt_tokens(body) -> int:
    """An upper bound on the prompt's tokens without tokenizing: a byte-level BPE token covers at
    least one UTF-8 byte, plus one BOS token per prompt (chat: per message, for template tokens
    of a few per message, counted generously as 8)."""
    messages = getattr(body, "messages", None)
    if messages is not None:
        return sum(8 + len(_content_text((m if isinstance(m, dict) else m.model_dump())
                                         .get("content")).encode()) for m in messages)
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (int, list)):
        return prompt_tokens(body, None)
    text = prompt if isinstance(prompt, str) else "\n".join(prompt or [])
    return len(text.encode()) + 1


def prompt_tokens(body, tokenizer: Tokenizer | None) -> int:
    """Prompt length in target tokens (a chat: its messages' text, template tokens not counted;
    without a tokenizer: characters / 4, a common rule of thumb for BPE vocabularies)."""
    messages = getattr(body, "messages", None)
    if messages is not None:
        text = "\n".join(_content_text((m if isinstance(m, dict) else m.model_dump())
                                       .get("content")) for m in messages)
    else:
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return len(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            return max(len(p) for p in prompt)
        if isinstance(prompt, list) and prompt:  # several prompts: the longest counts
            return max(_text_tokens(p, tokenizer) for p in prompt)
        text = prompt if isinstance(prompt, str) else ""
    return _text_tokens(text, tokenizer)


def _text_tokens(text: str, tokenizer: Tokenizer | None) -> int:
    return len(tokenizer.encode(str(text)).ids) if tokenizer else len(str(text)) // 4


def _content_text(content) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")
