"""What the router reads off a request before it runs: task, temperature, requested route,
options the speculative path refuses, and whether the prompt fills the speculator's context."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from tokenizers import Tokenizer

from router.classify import classify_text
from router.errors import RequestError
from router.policy import RequestedRoute, RequestFeatures


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
                           beyond_speculator_context=beyond)


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
