"""`python -m models.long_context_report`: EAGLE-3 against EAGLE 3.1 as prompts near the context
limit.

EAGLE 3.1 (models/eagle3.py, `v31`) normalises the fused features and feeds the next draft step
the post-norm state, against attention drift over long contexts. This measures whether the lab's
3.1 head holds its acceptance better than the plain EAGLE-3 head as the prompt grows: for each
prompt length L in `--lengths` (the target's context is 1024 tokens), `--prompts` evenly spaced
windows of L tokens from the corpus's held-out split (never trained on; the heads trained on
32-token prompts) are continued greedily for `--max-tokens` tokens, one request at a time, by
vLLM in float32 with each head (`method: eagle3`, k = `--k`). Per length and head: α per position
and mean acceptance length from vLLM's spec-decode counters (1 + accepted / drafts), tok/s, and
how many outputs equal the target's own (a vanilla engine's). Needs
`python -m models.heads --kinds eagle3 eagle31`.

    python -m models.long_context_report [--lengths 32 512 900] [--prompts 8] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from models.manifest import default_models_dir
from models.speculators_report import run_engine, speculative_config, summarize

HEADS = ("eagle3", "eagle31")


def length_prompts(target: Path, lengths: list[int], per_length: int
                   ) -> tuple[list[list[int]], list[str]]:
    """(prompt token ids, label "L=<length>" of each): `per_length` held-out windows per length."""
    from models.head_lab import corpus_streams

    _, heldout = corpus_streams(target.resolve())
    prompts, labels = [], []
    for length in lengths:
        windows = heldout.spaced_windows(per_length, length)
        prompts += [w.tolist() for w in windows]
        labels += [f"L={length}"] * per_length
    return prompts, labels


def markdown(report: dict) -> str:
    """One row per (prompt length, head)."""
    lines = ["| prompt tokens | head | α₁..α_k | mean acceptance length | tok/s | = target |",
             "|---|---|---|---|---|---|"]
    for label in report["vanilla"]:
        if label == "all":
            continue
        for head, rows in report["heads"].items():
            r = rows[label]
            lines.append(f"| {label[2:]} | {head} | {', '.join(f'{a:.2f}' for a in r['alpha'])} | "
                         f"{r['mean_acceptance_length']:.2f} | {r['tok_s']} | {r['identical']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m models.long_context_report",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=default_models_dir(), help="lab folder")
    ap.add_argument("--lengths", nargs="+", type=int, default=[32, 512, 900],
                    help="prompt lengths, tokens (+ max-tokens must fit the 1024 context)")
    ap.add_argument("--prompts", type=int, default=8, help="held-out windows per length")
    ap.add_argument("--max-tokens", type=int, default=96, help="generated tokens per prompt")
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)
    target = args.models / "target"
    if max(args.lengths) + args.max_tokens > 1024:
        ap.error(f"--lengths: {max(args.lengths)} + --max-tokens {args.max_tokens} exceeds the "
                 "target's 1024-token context")
    prompts, labels = length_prompts(target, args.lengths, args.prompts)
    vanilla = run_engine(str(target), None, prompts, labels, args.max_tokens, dtype="float32")
    report = {"args": {k: str(v) for k, v in vars(args).items()},
              "vanilla": summarize(vanilla, vanilla["outputs"], labels), "heads": {}}
    scratch = Path(tempfile.mkdtemp())
    for head in HEADS:
        spec = speculative_config(head, args.k, args.models, scratch)
        if spec is None:
            print(f"skipping {head}: not built (python -m models.heads --kinds {head})")
            continue
        result = run_engine(str(target), spec, prompts, labels, args.max_tokens, dtype="float32")
        report["heads"][head] = summarize(result, vanilla["outputs"], labels)
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
