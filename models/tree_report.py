"""`python -m models.tree_report`: chain vs tree drafting for the lab's EAGLE-3 head, offline in
torch (no vLLM): mean accepted length per target pass, per task type, at equal token budgets.

For each prompt of `bench/prompts/tasks.jsonl` (chat turns through the chat template, as
`models.speculators_report` sends them) the float32 target writes `--max-tokens` greedy tokens;
one target pass gives the aux layer outputs; the head, unrolled over that text, gives the rank of
the target's token at every draft position of every anchor. `models.spec_tree.walk` then replays
greedy speculative decoding with each tree (see `models.spec_tree` for why teacher-forced ranks are
exact at temperature 0). Trees at each budget N (draft tokens per target pass):

    chain        (1,)*N: vLLM's chain drafter with num_speculative_tokens = N
    top2-chains  (2, 1, ..., 1): the root's top-2 tokens, each followed by a greedy chain (N even)
    top2-full    (2, 2, ...): every node's top-2 children (N = 2^(d+1) - 2)
    calibrated   Medusa's static sparse tree: the N most frequent target paths (rank tuples) of
                 the `dev` split's anchors, all tasks pooled (`spec_tree.calibrated`); evaluated,
                 like every tree, on the `test` split
    calibrated-per-task  the same from each task's own `dev` prompts, used on that task (what a
                 router that knows the task type could pick per request)

    python -m models.tree_report [--models DIR] [--per-task 8] [--max-tokens 96] [--budgets 4 6 8]
        [--threads 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from models import spec_tree
from models.distill import continue_tokens
from models.eagle3 import Eagle3Head
from models.head_data import target_features
from models.head_lab import load_target
from models.lab import deterministic_torch
from models.manifest import default_models_dir
from models.speculators_report import TASKS, TASKS_FILE, token_prompts

def load_eagle3(models: Path, target) -> Eagle3Head:
    """The built EAGLE-3 head (`models/eagle3/`) as the lab's `Eagle3Head`, float32, eval mode."""
    cfg = json.loads((models / "eagle3" / "config.json").read_text())
    head = Eagle3Head(target, tuple(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]), 0)
    missing, unexpected = head.load_state_dict(load_file(models / "eagle3" / "model.safetensors"),
                                               strict=False)
    params = {n for n, _ in head.named_parameters()}
    if unexpected or params & set(missing):
        raise ValueError(f"eagle3: checkpoint mismatch, missing {missing}, unexpected {unexpected}")
    return head.eval().requires_grad_(False)


def prompts(split: str, per_task: int, path: Path = TASKS_FILE) -> list[dict]:
    """The first `per_task` prompts of each task in `split`: [{task, kind, prompt, ...}]."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for task in TASKS for r in [r for r in rows
                                          if r["task"] == task and r["split"] == split][:per_task]]


@torch.no_grad()
def head_ranks(target, head: Eagle3Head, prompt: list[int], max_tokens: int,
               positions: int) -> list[list[int]]:
    """Ranks [positions][T - 1 - j] of the target's greedy tokens under the head's unrolled drafts.

    rank = how many tokens the head scored strictly above the target's token at draft position
    j + 1 of anchor a (the target's token there being ids[a + j + 2]); 0 = the head's argmax.
    """
    ids = continue_tokens(target, torch.tensor([prompt]), max_tokens, 0.0)  # [1, T]
    data = target_features(target, ids, head.aux_layer_ids)
    t = ids.shape[1]
    out = []
    for j, logits in enumerate(head.unrolled(data.aux, ids, positions)):
        lg = logits[0, :t - 2 - j]  # anchors 0..T-3-j have a target token at a + j + 2
        tok = ids[0, j + 2:]
        out.append((lg > lg.gather(-1, tok[:, None])).sum(-1).tolist())
    return out


def trees(budget: int, freq: dict[tuple[int, ...], float]) -> dict[str, spec_tree.Tree]:
    """The shapes compared at `budget` draft tokens per pass (module docstring)."""
    shapes = {"chain": spec_tree.chain(budget)}
    if budget % 2 == 0 and budget >= 4:
        shapes["top2-chains"] = spec_tree.branching((2,) + (1,) * (budget // 2 - 1))
    d = 1
    while 2 ** (d + 1) - 2 < budget:
        d += 1
    if 2 ** (d + 1) - 2 == budget and d >= 2:
        shapes["top2-full"] = spec_tree.branching((2,) * d)
    shapes["calibrated"] = spec_tree.calibrated(budget, freq)
    return shapes


def describe(tree: spec_tree.Tree) -> str:
    """The tree as a list of rank paths, sorted by depth then rank."""
    return "[" + ", ".join(str(n) for n in sorted(tree, key=lambda n: (len(n), n))) + "]"


def report(models: Path, per_task: int, max_tokens: int, budgets: list[int]) -> dict:
    """Runs the measurement; returns {"rows": [...], "trees": {...}, "frequencies": ...}."""
    target = load_target(models)
    head = load_eagle3(models, target)
    positions = max(budgets)
    measured = {}
    for split in ("dev", "test"):
        rows = prompts(split, per_task)
        ids = token_prompts(models / "target", rows)
        measured[split] = [(r["task"], len(p), head_ranks(target, head, p, max_tokens, positions))
                           for r, p in zip(rows, ids)]
    # Calibration: generated anchors only (from start - 1 on); the prompt is not the target's text.
    def freq_of(task: str) -> dict[tuple[int, ...], float]:
        return spec_tree.path_frequencies([[r[s - 1:] for r in ranks] for t, s, ranks
                                           in measured["dev"] if task in (t, "all")], positions)

    freq = freq_of("all")
    out_rows, shapes_out = [], {}
    for budget in budgets:
        per_task_trees = {t: spec_tree.calibrated(budget, freq_of(t)) for t in TASKS}
        shapes = {name: dict.fromkeys(TASKS, tree) for name, tree in trees(budget, freq).items()}
        shapes["calibrated-per-task"] = per_task_trees
        for name, by_task in shapes.items():
            for t, tree in by_task.items():
                if name == "calibrated-per-task" or t == TASKS[0]:
                    shapes_out[f"{budget}/{name}" + (f"/{t}" if name == "calibrated-per-task"
                                                     else "")] = describe(tree)
            row = {"budget": budget, "tree": name, "nodes": budget,
                   "depth": "/".join(sorted({str(spec_tree.depth(x)) for x in by_task.values()}))}
            accepted, passes = 0.0, 0
            for t in TASKS:
                picked = [(s, r) for task, s, r in measured["test"] if task == t]
                res = spec_tree.walk([r for _, r in picked], [s for s, _ in picked], by_task[t])
                row[t] = res["mean_acceptance_length"]
                accepted += (res["mean_acceptance_length"] - 1) * res["passes"]
                passes += res["passes"]
            row["all"], row["passes"] = round(1 + accepted / passes, 4), passes
            out_rows.append(row)
    top = sorted(freq, key=lambda n: (-freq[n], len(n), n))[:12]
    return {"rows": out_rows, "trees": shapes_out,
            "frequencies": {str(n): round(freq[n], 4) for n in top},
            "prompts": {s: len(m) for s, m in measured.items()}, "max_tokens": max_tokens}


def markdown(result: dict) -> str:
    """The table: mean accepted length per target pass (bonus included) per task."""
    head = ["budget", "tree", "nodes", "depth", *TASKS, "all", "passes (all)"]
    keys = ("budget", "tree", "nodes", "depth", *TASKS, "all", "passes")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in result["rows"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m models.tree_report",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, default=None,
                        help=f"lab folder with target/ and eagle3/ "
                             f"(default: {default_models_dir()})")
    parser.add_argument("--per-task", type=int, default=8, help="prompts per task and split")
    parser.add_argument("--max-tokens", type=int, default=96,
                        help="greedy target tokens per prompt")
    parser.add_argument("--budgets", type=int, nargs="+", default=[4, 6, 8],
                        help="draft tokens per target pass")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    models = (args.models or default_models_dir()).expanduser().resolve()
    start = time.perf_counter()
    with deterministic_torch(args.threads):
        result = report(models, args.per_task, args.max_tokens, args.budgets)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    print(markdown(result))
    for name, tree in result["trees"].items():
        print(f"{name}: {tree}")
    print(f"most frequent target paths on dev (node: fraction of anchors): {result['frequencies']}")
    print(f"prompts {result['prompts']}, {args.max_tokens} tokens each, {result['wall_s']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
