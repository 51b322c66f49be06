"""Closed sets every layer names, the strict base of every config model, and its error.

`Strict` is pydantic's `extra="forbid"` (an unknown key is an error naming it) and `frozen=True`
(a config is a value: replicas receive it by copy and never mutate it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

SpeculativeMethod = Literal["draft_model", "ngram", "eagle3", "eagle", "medusa"]
Route = Literal["speculative", "vanilla"]
RequestedRoute = Literal["auto", "speculative", "vanilla"]  # a request's `route`, a pin
TaskType = Literal["code", "math", "extraction", "chat", "creative"]


class Strict(BaseModel):
    """Base of every config model: unknown keys refused, instances immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfigError(ValueError):
    """A configuration that cannot be served; the message names the field(s)."""
