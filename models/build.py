"""`python -m models.build`: builds the model lab's tokenizer, target and draft.

Output folder (default `$SPECSERVE_MODELS_DIR`, else `~/.cache/specserve/models`)::

    target/       LlamaForCausalLM, Hugging Face layout (config.json, model.safetensors,
                  generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja)
    draft/        smaller LlamaForCausalLM distilled from the target, same tokenizer
    report.json   sizes, FLOPs, training, held-out losses, greedy agreement, corpus
    manifest.json build digest; present only in a complete build

A second run with the same parameters and corpus returns at once ("cached"); `--force` rebuilds.

Example:
    >>> result = build(Path("/tmp/lab"), BuildParams(target_steps=2, draft_steps=2))  # doctest: +SKIP
    >>> result.report["flops_ratio_draft_to_target"] < 0.2  # doctest: +SKIP
    True
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from models.corpus import load_corpus
from models.manifest import (MANIFEST_NAME, atomic_dir, build_digest, default_models_dir, is_built,
                             manifest, write_json)
from models.params import CODE_VERSION, BuildParams, params_from_args
from models.report import summary

REPORT_NAME = "report.json"


@dataclass(frozen=True, slots=True)
class BuildResult:
    """Where the build is, whether it was already there, and its report.json content."""

    out: Path
    cached: bool
    report: dict


def build(out: Path | None = None, params: BuildParams | None = None, force: bool = False,
          corpus_root: Path | None = None, threads: int = 2) -> BuildResult:
    """Builds (or finds cached) tokenizer + target + draft into `out`.

    Args:
        out: output folder; default `default_models_dir()`. Replaced atomically.
        params: build parameters; default `BuildParams()` (the ~10 minute CI build).
        force: rebuild even when `out` holds a build with the same digest.
        corpus_root: folder of `*.py` sources; default the running Python's stdlib.
        threads: torch threads; weights are bit-reproducible for a fixed count.

    Raises:
        ValueError: the corpus is empty or too small for the parameters.
    """
    out = (out or default_models_dir()).expanduser().resolve()
    params = params or BuildParams()
    corpus = load_corpus(corpus_root, params.heldout_fraction, params.max_files)
    corpus_digest = corpus.digest()
    digest = build_digest(params, corpus_digest)
    if not force and is_built(out, digest):
        return BuildResult(out, True, json.loads((out / REPORT_NAME).read_text()))
    # Imported here, not at the top: torch + transformers take ~7 s to import, and a cached build
    # (above) never needs them.
    from models.lab import run_lab
    start = time.perf_counter()
    with atomic_dir(out) as partial:
        report = run_lab(params, corpus, partial, threads)
        report = {"digest": digest, "code_version": CODE_VERSION, "params": params.as_dict(),
                  "build_wall_s": time.perf_counter() - start, **report}
        write_json(partial / REPORT_NAME, report)
        write_json(partial / MANIFEST_NAME, manifest(params, corpus_digest))
    return BuildResult(out, False, report)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build's flags, with their defaults (also `specserve models build`'s)."""
    defaults = BuildParams()
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output folder (default: {default_models_dir()})")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="random seed")
    parser.add_argument("--target-steps", type=int, default=defaults.target_steps,
                        help="target pre-training steps")
    parser.add_argument("--draft-steps", type=int, default=defaults.draft_steps,
                        help="draft distillation steps")
    parser.add_argument("--max-files", type=int, default=None,
                        help="use only this many corpus files (quick trials); default all")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m models.build", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    params = params_from_args(BuildParams(), args)
    result = build(args.out, params, force=args.force, threads=args.threads)
    if result.cached:
        print(f"cached: {result.out} already holds this build (digest {result.report['digest'][:12]}); "
              "--force rebuilds")
    print(summary(result.report))
    if not result.cached:  # a cached build wrote nothing
        print(f"wrote {result.out}/{{target,draft,{REPORT_NAME},{MANIFEST_NAME}}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
