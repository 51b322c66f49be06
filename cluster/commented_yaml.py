"""YAML with a comment above each field, for manifests written in KubeRay's sample style.

A manifest is built as plain dicts and lists whose values may be wrapped: `Doc(comment, value)`
puts `# comment` above the field, `Default(comment, value)` shows an optional field commented out
at its default. `plain()` unwraps for the API; `dump()` writes the commented YAML.

Example:
    >>> print(dump({"spec": Doc("Ray version in the image.", {"rayVersion": "2.60.0"})}), end="")
    # Ray version in the image.
    spec:
      rayVersion: 2.60.0
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import yaml

WIDTH = 100


@dataclass(frozen=True, slots=True)
class Doc:
    """A field value with the comment written above it."""

    comment: str
    value: Any


@dataclass(frozen=True, slots=True)
class Default:
    """An optional field left unset: written commented out at its default, absent from `plain()`."""

    comment: str
    value: Any


def plain(node: Any) -> Any:
    """The manifest without comments or unset defaults: what the API server receives."""
    if isinstance(node, Doc):
        return plain(node.value)
    if isinstance(node, dict):
        return {k: plain(v) for k, v in node.items() if not isinstance(v, Default)}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


def dump(node: Any, header: str = "") -> str:
    """Commented YAML of a mapping; `header` lines become a leading comment block."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _mapping(node, 0, lines)
    return "\n".join(lines) + "\n"


def _comment(text: str, indent: int, out: list[str]) -> None:
    pad = " " * indent
    out.extend(textwrap.wrap(text, WIDTH - indent, initial_indent=pad + "# ",
                             subsequent_indent=pad + "# ", break_on_hyphens=False))


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
    return text.removesuffix("\n...\n").removesuffix("\n")


def _mapping(node: dict, indent: int, out: list[str], first_prefix: str | None = None) -> None:
    """Writes `node`'s fields; the first key takes `first_prefix` (a list dash) when given."""
    for i, (key, value) in enumerate(node.items()):
        prefix = first_prefix if i == 0 and first_prefix is not None else " " * indent
        if isinstance(value, (Doc, Default)):  # a list item's first comment is above its dash
            _comment(value.comment, indent, out)
        if isinstance(value, Default):
            out.append(f"{' ' * indent}# {key}: {_scalar(plain(value.value))}")
            continue
        _field(key, plain_top(value), prefix, indent, out)


def plain_top(value: Any) -> Any:
    """Unwraps one `Doc` (the field's own comment); nested comments stay for their fields."""
    return value.value if isinstance(value, Doc) else value


def _field(key: str, value: Any, prefix: str, indent: int, out: list[str]) -> None:
    if isinstance(value, dict) and value:
        out.append(f"{prefix}{key}:")
        _mapping(value, indent + 2, out)
    elif isinstance(value, list) and value:
        out.append(f"{prefix}{key}:")
        _sequence(value, indent + 2, out)
    elif isinstance(value, str) and "\n" in value:
        chomp = "" if value.endswith("\n") else "-"
        out.append(f"{prefix}{key}: |{chomp}")
        out.extend(f"{' ' * (indent + 2)}{line}" if line else "" for line in
                   value.removesuffix("\n").split("\n"))
    else:
        out.append(f"{prefix}{key}: {_scalar(plain(value))}")


def _sequence(items: list, indent: int, out: list[str]) -> None:
    for item in items:
        item = plain_top(item)
        if isinstance(item, dict) and item:
            key, first = next(iter(item.items()))
            if isinstance(first, Doc):
                _comment(first.comment, indent, out)
                item = {**item, key: first.value}
            _mapping(item, indent + 2, out, first_prefix=" " * indent + "- ")
        else:
            out.append(f"{' ' * indent}- {_scalar(plain(item))}")
