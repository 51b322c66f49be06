"""`python -m bench.memory_bus`: what two engines on their own cores make together, with no
frontend: the share of the second core that the memory bus leaves.

    python -m bench.memory_bus [--config cluster/examples/wide.yaml] [--batches 1 4 8 16]
                               [--seconds 8] [--repeats 3] [--json FILE]

The served benchmark's machine cell (bench/run.py) puts two pools' engines and the frontend on two
cores and measured 1.15x one pool on the weight-bound target (2026-12-06). This takes the frontend
out: two offline vLLM engines of the config's target (its dtype and `max_model_len`; vanilla,
compiled as `make serve` runs them), each in its own process pinned to its own core as a served
replica is (`VLLM_CPU_OMP_THREADS_BIND`, deployments/cores.py), run greedy code prompts at batch
B for `--seconds` each, one engine alone, then both at once, interleaved `--repeats` times. On a
GPU each replica reads its weights from its own HBM and both-at-once is 2.0x; here the two share
one memory bus and last-level cache, and what they make together over what one makes alone is
the most a second replica can add on this machine, whatever the frontend costs. Measured on the
2-core Intel Xeon of 2026-12-06 (480 MiB L3), weight-bound target: 2.01x / 1.97x / 2.02x at batch
1 / 4 / 16 (`bench/results/2026-12-06-memory-bus/`): the bus takes nothing there. The split
ceiling (below) on the same machine: 1.28x / 1.35x / 1.53x at 8 / 16 / 32 streams on the
weight-bound target, 1.07x / 1.20x / 1.45x on the tiny default
(`bench/results/2026-12-06-memory-bus-split/`).

Prints, per batch, each engine's output tok/s alone and together, and `together / alone`
(median [min-max] over the repeats; the sum of both engines' together rates over the mean of
their alone rates). Where the batches hold both B and B/2 it also prints the **split ceiling**
at B: both engines at once at B/2 each over one engine alone at B (`split_ceilings`). That is
the served machine cell's own comparison (bench/cells.py: `--machine-concurrency` streams on one
pool, or half on each pool) without a frontend and with the second pool vanilla too: an engine
whose step time grows with the batch makes more than half its batch-B rate at B/2, so splitting
gains less than 2x even with a core and a memory bus each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from core import SpecserveConfig, resolve_path
from core.cpu import served_dtype

PROMPTS = ("import os\n\ndef list_files(path):\n    ", "def fibonacci(n):\n    ",
           "class Stack:\n    def __init__(self):\n        ", "def parse_args(argv):\n    ",
           "def read_config(path):\n    with open(path) as f:\n        ",
           "for i in range(10):\n    ")
MAX_TOKENS = 32  # per generate call; a cell loops calls for its seconds
IOMP = Path(sys.prefix) / "lib" / "libiomp5.so"


def worker_env(core: int, kvcache_gib: int = 1) -> dict[str, str]:
    """Environment of an engine process on `core`: vLLM's CPU binding to that core alone, its
    engine in the process (no engine-core child), Intel's OpenMP as served replicas load it."""
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=str(core), VLLM_CPU_NUM_OF_RESERVED_CPU="0",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE=str(kvcache_gib))
    if IOMP.is_file():
        env["LD_PRELOAD"] = str(IOMP)
    return env


def worker(model: str, dtype: str, max_model_len: int) -> None:
    """The engine process: prints `ready`, then for each stdin line `B SECONDS` runs batch B
    for SECONDS and prints {"tok_s", "seconds", "calls"}; `quit` ends it."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype=dtype, max_model_len=max_model_len, seed=0, max_num_seqs=64)
    sp = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for b in (1, 2, 4, 8, 16, 32, 64):  # compile the shapes before any timing
        llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(b)], sp, use_tqdm=False)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        b, seconds = int(line.split()[0]), float(line.split()[1])
        batch = [PROMPTS[i % len(PROMPTS)] for i in range(b)]
        tokens, calls, t0 = 0, 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            outs = llm.generate(batch, sp, use_tqdm=False)
            tokens += sum(len(o.outputs[0].token_ids) for o in outs)
            calls += 1
        dt = time.perf_counter() - t0
        print(json.dumps({"tok_s": tokens / dt, "seconds": dt, "calls": calls}), flush=True)


class Engine:
    """One worker process pinned to `core`."""

    def __init__(self, core: int, model: str, dtype: str, max_model_len: int):
        self.core = core
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(core), sys.executable, "-m", "bench.memory_bus", "--worker",
             "--model", model, "--dtype", dtype, "--max-model-len", str(max_model_len)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=worker_env(core))

    def wait_ready(self) -> None:
        for line in self.proc.stdout:
            if line.strip() == "ready":
                return
        raise RuntimeError(f"engine on core {self.core} exited {self.proc.wait()} before ready")

    def start(self, batch: int, seconds: float) -> None:
        self.proc.stdin.write(f"{batch} {seconds}\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"engine on core {self.core} exited {self.proc.wait()}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def together_over_alone(alone: list[float], together: list[float]) -> float:
    """Both engines' summed rate at once over one engine's mean rate alone (2.0: no sharing).

    Args:
        alone: each engine's tok/s run alone (one per engine).
        together: each engine's tok/s while both ran (one per engine).
    """
    return sum(together) / statistics.fmean(alone)


def split_ceilings(results: dict[int, list[dict]]) -> dict[int, list[float]]:
    """{B: the split ceiling per repeat} for every B of `results` whose B/2 is also there (the
    same repeat's rows paired): `together_over_alone` of one engine alone at B and both at once
    at B/2 each (2.0 only where the rate does not grow with the batch)."""
    return {b: [together_over_alone(full["alone"], half["together"])
                for full, half in zip(rows, results[b // 2])]
            for b, rows in sorted(results.items()) if b % 2 == 0 and b // 2 in results}


def measure(engines: list[Engine], batches: list[int], seconds: float, repeats: int,
            log=print) -> dict[int, list[dict]]:
    """{batch: one entry per repeat: {"alone": [tok/s per engine], "together": [...],
    "ratio": together_over_alone}}; each engine runs alone in turn, then all at once."""
    out: dict[int, list[dict]] = {b: [] for b in batches}
    for r in range(repeats):
        for b in batches:
            alone = []
            for e in engines:
                e.start(b, seconds)
                alone.append(e.result()["tok_s"])
            for e in engines:
                e.start(b, seconds)
            together = [e.result()["tok_s"] for e in engines]
            row = {"alone": alone, "together": together,
                   "ratio": together_over_alone(alone, together)}
            out[b].append(row)
            log(f"round {r + 1} batch {b}: alone {[round(x, 1) for x in alone]} tok/s, "
                f"together {[round(x, 1) for x in together]} tok/s, ratio {row['ratio']:.2f}")
    return out


def table(results: dict[int, list[dict]]) -> str:
    """Markdown: per batch, alone and together tok/s (summed over engines for together) and the
    ratio, median [min-max] over the repeats; then the split ceilings (`split_ceilings`), if
    any."""
    lines = ["| batch | one engine alone, tok/s | both at once, tok/s (sum) | together / alone |",
             "|---|---|---|---|"]
    for b, rows in sorted(results.items()):
        lines.append(f"| {b} | {spread([statistics.fmean(r['alone']) for r in rows])} | "
                     f"{spread([sum(r['together']) for r in rows])} | "
                     f"{spread([r['ratio'] for r in rows], '{:.2f}')}x |")
    splits = split_ceilings(results)
    if splits:
        lines += ["", "| streams B | one engine at B, tok/s | both at once at B/2 each, tok/s (sum) "
                  "| split ceiling |", "|---|---|---|---|"]
        for b, ratios in splits.items():
            lines.append(f"| {b} | {spread([statistics.fmean(r['alone']) for r in results[b]])} | "
                         f"{spread([sum(r['together']) for r in results[b // 2]])} | "
                         f"{spread(ratios, '{:.2f}')}x |")
    return "\n".join(lines)


def spread(xs: list[float], fmt: str = "{:.0f}") -> str:
    """`median [min-max]` of `xs`, each formatted with `fmt`."""
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memory_bus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=Path("cluster/examples/wide.yaml"))
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    p.add_argument("--max-model-len", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.model, args.dtype, args.max_model_len)
        return 0
    if (os.cpu_count() or 1) < 2:
        p.error("needs two cores: one engine per core")
    cfg = SpecserveConfig.from_yaml(args.config)
    model = resolve_path(cfg.model.path)
    dtype = served_dtype(cfg.model.dtype, "cpu")
    engines = [Engine(core, model, dtype, cfg.model.max_model_len) for core in (0, 1)]
    try:
        for e in engines:
            e.wait_ready()
        results = measure(engines, args.batches, args.seconds, args.repeats)
    finally:
        for e in engines:
            e.close()
    print(f"\n{model} ({dtype}), {args.seconds:g} s per cell, {args.repeats} repeats\n")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(
            {**{str(b): rows for b, rows in results.items()},
             "split_over_alone": {str(b): r for b, r in split_ceilings(results).items()}},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
