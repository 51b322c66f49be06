"""The default config as a plain dict, with the session application's draft-model speculator, and
`config_data(a__b=value)` to change it: the base of the config sweeps (unit and integration)."""

from __future__ import annotations

import copy

from core import DEFAULT_CONFIG_PATH, SpecserveConfig
from tests.session_app import DRAFT_SPECULATOR

# The draft-model speculator is the method most config checks concern (its own checkpoint,
# context and draft tensor parallelism).
BASE = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json", exclude={
    "kubernetes"})
BASE["speculative"]["speculator"] = {**DRAFT_SPECULATOR, "max_model_len": None}


def config_data(**changes) -> dict:
    """The default config with `a__b=value` changes (dicts merged into the node)."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = {**node[leaf], **value} if isinstance(value, dict) and isinstance(
            node.get(leaf), dict) else value
    return data
