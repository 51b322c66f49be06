"""`python -m models.acceptance`: checks a built lab in vLLM and measures draft acceptance.

Runs the target alone, then the target with the draft (`method="draft_model"`), one engine at a
time in this process, both greedy on the same prompts; prints whether the outputs are identical,
vLLM's speculative-decoding counters, and tokens/s of each. Slow-path settings for a quick check:
in-process engine, eager mode, `VLLM_CPU_KVCACHE_SPACE=1` GiB unless already set.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python -m models.acceptance --models ~/.cache/specserve/models
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from vllm import LLM, SamplingParams  # noqa: E402  (reads the environment above at import)
from vllm.distributed.parallel_state import (destroy_distributed_environment,  # noqa: E402
                                             destroy_model_parallel)

from core.stats import per_position_acceptance  # noqa: E402
from models.corpus import load_corpus  # noqa: E402
from models.manifest import default_models_dir  # noqa: E402
from models.spec_metrics import minus, read_counters  # noqa: E402


def heldout_prompts(count: int, lines: int = 3) -> list[str]:
    """`count` prompts: "def fibonacci(n):" then the first `lines` lines of held-out `def`s."""
    corpus = load_corpus()
    prompts = ["def fibonacci(n):\n"]
    for f in corpus.heldout:
        text = corpus.read(f).splitlines()
        starts = [i for i, line in enumerate(text) if line.lstrip().startswith("def ")]
        if starts:
            prompts.append("\n".join(text[starts[0]:starts[0] + lines]) + "\n")
        if len(prompts) >= count:
            break
    return prompts


def spec_counters(llm: LLM) -> dict:
    """The engine's spec-decode counters by short name (models.spec_metrics.read_counters)."""
    return read_counters(llm.get_metrics())


def run_engine(target: Path, prompts: list[str], max_tokens: int, dtype: str,
               speculative_config: dict | None) -> tuple[list[list[int]], float, dict]:
    """Generates greedily; returns (token ids per prompt, generated tokens/s, spec counters).

    The counters exclude the one-prompt warm-up that precedes the timed batch.
    """
    llm = LLM(model=str(target), enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=1024, disable_log_stats=False, seed=0, dtype=dtype,
              speculative_config=speculative_config)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(prompts[:1], params, use_tqdm=False)
    before = spec_counters(llm)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    wall_s = time.perf_counter() - start
    ids = [list(o.outputs[0].token_ids) for o in outputs]
    counters = minus(spec_counters(llm), before)
    del llm
    gc.collect()
    destroy_model_parallel()
    destroy_distributed_environment()
    return ids, sum(map(len, ids)) / wall_s, counters


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 1 when speculative output differs from vanilla or nothing is accepted."""
    parser = argparse.ArgumentParser(prog="python -m models.acceptance", description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, default=default_models_dir(), help="built lab folder")
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--prompts", type=int, default=8, help="number of prompts")
    parser.add_argument("--max-tokens", type=int, default=128, help="generated tokens per prompt")
    parser.add_argument("--dtype", default="auto",
                        help="vLLM dtype; auto means bfloat16 on x86 CPUs (weights are float32)")
    args = parser.parse_args(argv)
    target, draft = args.models / "target", args.models / "draft"
    prompts = heldout_prompts(args.prompts)
    vanilla, vanilla_tok_s, _ = run_engine(target, prompts, args.max_tokens, args.dtype, None)
    spec, spec_tok_s, c = run_engine(target, prompts, args.max_tokens, args.dtype,
                                     {"method": "draft_model", "model": str(draft),
                                      "num_speculative_tokens": args.k})
    drafts, accepted = c.get("num_drafts", 0), c.get("num_accepted_tokens", 0)
    result = {
        "prompts": len(prompts), "max_tokens": args.max_tokens, "k": args.k, "dtype": args.dtype,
        "identical_to_vanilla": spec == vanilla,
        "identical_prompts": sum(a == b for a, b in zip(spec, vanilla)),
        "counters": c,
        "acceptance_rate": accepted / c["num_draft_tokens"] if c.get("num_draft_tokens") else 0.0,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
        "alpha_by_pos": per_position_acceptance(drafts, c.get("num_accepted_tokens_per_pos", [])),
        "vanilla_tok_s": vanilla_tok_s, "speculative_tok_s": spec_tok_s,
    }
    print(json.dumps(result, indent=2))
    return 0 if result["identical_to_vanilla"] and accepted > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
