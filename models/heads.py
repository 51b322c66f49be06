"""`python -m models.heads`: trains the EAGLE-3 head and the Medusa heads (and, opt-in, an EAGLE-1
head) on the built target.

Output, next to the lab's `target/` (default `$SPECSERVE_MODELS_DIR`, else
`~/.cache/specserve/models`)::

    eagle3/   config.json + model.safetensors (vLLM LlamaForCausalLMEagle3), report.json, manifest.json
    medusa/   config.json + model.safetensors (vLLM MedusaModel), report.json, manifest.json
    eagle/    config.json + model.safetensors (vLLM EagleLlamaForCausalLM); only with --kinds eagle
    eagle31/  as eagle3/, with EAGLE 3.1's `fc_norm` and `norm_output` (vLLM `method: eagle3`);
              only with --kinds eagle31

Each folder is built atomically (`models.manifest.atomic_dir`) and is cached by its own digest:
sha256 of `HEADS_CODE_VERSION`, the head's fields of `HeadParams` and the target build's digest, so
a rebuilt target retrains its heads and a second run prints `cached:`. Both heads learn from one
set of target-written sequences with the target's hidden states (`models.head_data`).

Example:
    >>> result = build_heads(models_dir, HeadParams(eagle3_steps=2, medusa_steps=2))  # doctest: +SKIP
    >>> sorted(result)  # doctest: +SKIP
    ['eagle3', 'medusa']
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from contextlib import ExitStack
from pathlib import Path

from models.head_params import HEADS_CODE_VERSION, HeadParams
from models.manifest import MANIFEST_NAME, atomic_dir, default_models_dir, read_manifest, write_json
from models.params import params_from_args

HEAD_KINDS = ("eagle3", "medusa", "eagle", "eagle31")
DEFAULT_KINDS = ("eagle3", "medusa")  # what `make models` builds; EAGLE-1 and 3.1 are opt-in
REPORT_NAME = "report.json"
_COMMON = ("seed", "sequences", "prompt_len", "new_tokens", "temperatures", "prompt_formats",
           "batch_size", "warmup_steps", "eval_sequences")
_FIELDS = {"eagle3": _COMMON + ("aux_layer_ids", "ttt_steps", "ttt_decay", "eagle3_steps", "eagle3_lr"),
           "medusa": _COMMON + ("medusa_heads", "medusa_steps", "medusa_lr"),
           "eagle": _COMMON + ("ttt_steps", "ttt_decay", "eagle_steps", "eagle3_lr")}
_FIELDS["eagle31"] = _FIELDS["eagle3"]


def head_digest(kind: str, params: HeadParams, target_digest: str) -> str:
    """sha256 hex of the code version, the head's parameters and the target's build digest."""
    fields = {f: getattr(params, f) for f in _FIELDS[kind]}
    payload = json.dumps({"code_version": HEADS_CODE_VERSION, "kind": kind, "params": fields,
                          "target_digest": target_digest}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _target_digest(models: Path) -> str:
    found = read_manifest(models)
    if not (models / "target" / "config.json").is_file() or found is None:
        raise FileNotFoundError(f"{models}: no built target; run `python -m models.build` first")
    return found["digest"]


def build_heads(models: Path | None = None, params: HeadParams | None = None,
                kinds: tuple[str, ...] = DEFAULT_KINDS, force: bool = False, threads: int = 1,
                out: Path | None = None) -> dict[str, dict]:
    """Builds (or finds cached) each head in `kinds`; returns {kind: report.json content}.

    Args:
        models: the lab folder holding `target/` and `manifest.json`; default `default_models_dir()`.
        params: head parameters; default `HeadParams()`.
        kinds: subset of HEAD_KINDS.
        force: retrain even when cached.
        threads: torch threads (weights are reproducible for a fixed count).
        out: where the head folders go; default `models`.

    Raises:
        FileNotFoundError: `models` holds no built target.
        ValueError: unknown kind.
    """
    models = (models or default_models_dir()).expanduser().resolve()
    out = (out or models).expanduser().resolve()
    params = params or HeadParams()
    if unknown := set(kinds) - set(HEAD_KINDS):
        raise ValueError(f"kinds: unknown {sorted(unknown)}; known {HEAD_KINDS}")
    target_digest = _target_digest(models)
    digests = {k: head_digest(k, params, target_digest) for k in kinds}
    reports, todo = {}, []
    for kind in kinds:
        found = read_manifest(out / kind)
        if not force and found is not None and found.get("digest") == digests[kind]:
            reports[kind] = {**json.loads((out / kind / REPORT_NAME).read_text()), "cached": True}
        else:
            todo.append(kind)
    if todo:
        # Imported here: torch + transformers take seconds to import and a cached build needs neither.
        from models.head_lab import train_heads
        start = time.perf_counter()
        # All folders appear together, or none when training fails.
        with ExitStack() as stack:
            dirs = {k: stack.enter_context(atomic_dir(out / k)) for k in todo}
            trained = train_heads(models, params, dirs, threads)
            for kind in todo:
                report = {"kind": kind, "digest": digests[kind], "code_version": HEADS_CODE_VERSION,
                          "target_digest": target_digest, "params": params.as_dict(),
                          "build_wall_s": time.perf_counter() - start, **trained[kind]}
                write_json(dirs[kind] / REPORT_NAME, report)
                write_json(dirs[kind] / MANIFEST_NAME, {"digest": digests[kind], "kind": kind,
                                                        "target_digest": target_digest})
                reports[kind] = report
    return reports


def summary(reports: dict[str, dict]) -> str:
    """One line per head: torch-side held-out agreement and training time."""
    lines = []
    for kind, r in reports.items():
        ev = r.get("heldout", {})
        chain = ev.get("chain")
        lines.append(f"{kind}: held-out greedy agreement α {ev.get('alpha')} -> mean acceptance "
                     f"length {ev.get('mean_acceptance_length')}"
                     + (f"; as vLLM counts it α {chain['alpha']}, mean acceptance length "
                        f"{chain['mean_acceptance_length']}" if chain else "")
                     + f"; train {r['train']['wall_s']:.0f} s"
                     f" ({r['train']['steps']} steps){' (cached)' if r.get('cached') else ''}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The heads' flags, with their defaults (also `specserve models heads`'s)."""
    d = HeadParams()
    parser.add_argument("--models", type=Path, default=None,
                        help=f"lab folder with target/ (default: {default_models_dir()})")
    parser.add_argument("--kinds", nargs="+", choices=HEAD_KINDS, default=list(DEFAULT_KINDS),
                        help="heads to build (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=d.seed, help="random seed")
    parser.add_argument("--eagle3-steps", type=int, default=d.eagle3_steps, help="EAGLE-3 steps")
    parser.add_argument("--eagle-steps", type=int, default=d.eagle_steps, help="EAGLE-1 steps")
    parser.add_argument("--medusa-steps", type=int, default=d.medusa_steps, help="Medusa steps")
    parser.add_argument("--sequences", type=int, default=d.sequences,
                        help="target-written training sequences")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--force", action="store_true", help="retrain even if cached")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m models.heads", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    params = params_from_args(HeadParams(), args)
    reports = build_heads(args.models, params, tuple(args.kinds), args.force, args.threads)
    print(summary(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
