"""Where configs and models live, how a model path expands (`${models}`, `~`, `$VAR`), and what a
local checkpoint's config.json says."""

from __future__ import annotations

import json
import os
from pathlib import Path

# The shipped default config; a data file of the `cluster` package (package-data), read by path.
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[1] / "cluster" / "default.yaml"
MODELS_DIR_ENV = "SPECSERVE_MODELS_DIR"


def models_dir() -> Path:
    """Folder the model lab writes to and `${models}` in paths expands to.

    `$SPECSERVE_MODELS_DIR`, else `~/.cache/specserve/models` (outside the checkout so a fresh
    clone reuses a built lab).
    """
    return Path(os.environ.get(MODELS_DIR_ENV, "~/.cache/specserve/models")).expanduser()


def resolve_path(path: str) -> str:
    """Expands `${models}`, `~` and environment variables in a model path; returns a string."""
    return os.path.expandvars(os.path.expanduser(path.replace("${models}", str(models_dir()))))


def read_config_value(model_path: str, key: str) -> int | None:
    """`key` from a checkpoint's config.json (or its text_config), or None when the folder is not
    local or the key is absent."""
    cfg = Path(resolve_path(model_path)) / "config.json"
    if not cfg.is_file():
        return None
    data = json.loads(cfg.read_text())
    return data.get(key) or data.get("text_config", {}).get(key)
