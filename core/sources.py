"""Where the config an entrypoint runs on comes from (`load_config`): a YAML file, Serve's inline
args, a JSON environment variable or the shipped default, then checked against its local
checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.checkpoints import check_checkpoints
from core.config import SpecserveConfig
from core.paths import DEFAULT_CONFIG_PATH


def load_config(path: str | Path | None = None, *, inline: dict | None = None,
                env_var: str | None = None, image: str | None = None,
                check: bool = True) -> SpecserveConfig:
    """The config every entrypoint runs on, from the first source given.

    Sources, in order: the YAML file `path`; the `inline` fields (source `args`); the JSON in
    `$env_var` when `path` is None and that variable is set and not empty; `DEFAULT_CONFIG_PATH`.

    Args:
        path: a YAML config file (`--config`, Serve's `config_path`); None or empty: not given.
        inline: the config's fields as a dict (Serve's inline `args`); None: not given.
        env_var: an environment variable that may hold the config as JSON (the RayJob's
            `SPECSERVE_CONFIG_JSON`); None: none is read.
        image: replaces `kubernetes.image`, re-validated (source `<path> with --image`).
        check: also check the config against its local checkpoints (`check_checkpoints`:
            context, heads, vocab); off where the models live on another machine.

    Raises:
        ConfigError: an unreadable file, bad YAML, a field that fails validation (each named,
            prefixed by its source), or, with `check`, a config that does not fit its checkpoints.
        json.JSONDecodeError: `$env_var` is set but not JSON.

    Example:
        >>> load_config("cluster/default.yaml", check=False).server.port
        8000
    """
    if path:
        cfg = SpecserveConfig.from_yaml(path)
    elif inline is not None:
        cfg = SpecserveConfig.from_dict(inline, "args")
    elif path is None and env_var and os.environ.get(env_var):
        cfg = SpecserveConfig.from_dict(json.loads(os.environ[env_var]), source=f"${env_var}")
    else:
        cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
    if image is not None:
        data = cfg.model_dump(mode="json", exclude_unset=True)
        data.setdefault("kubernetes", {})["image"] = image
        cfg = SpecserveConfig.from_dict(data, source=f"{path} with --image")
    if check:
        check_checkpoints(cfg)
    return cfg
