"""The build pipeline: tokenizer, target pre-training, draft distillation, evaluation, export.

`run_lab` writes `target/` and `draft/` (Hugging Face layout, safetensors, tokenizer files) into a
folder and returns the report as a dict. Determinism: one `torch.Generator` seeded from
`params.seed` drives every random choice, model init uses `torch.manual_seed`, and
`torch.use_deterministic_algorithms(True)` is on for the duration; weights are bit-identical for
the same parameters, corpus and thread count.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
import transformers

from models.bigram import init_from_bigram
from models.corpus import Corpus
from models.distill import kl_loss, mixed_batches
from models.evaluation import greedy_agreement, heldout_loss
from models.head_data import chat_turn_ids, wrap_chat_turns, write_sequences
from models.llama import flops_per_token, llama_config, new_llama, param_counts
from models.params import BuildParams
from models.stream import TokenStream
from models.tokenizer import train_tokenizer
from models.train import Schedule, train

SAMPLE_PROMPT = "def fibonacci(n):"
SAMPLE_NEW_TOKENS = 64


@contextmanager
def deterministic_torch(threads: int) -> Iterator[None]:
    """Sets torch's thread count and deterministic algorithms, restoring both afterwards."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)


def _sample(model: transformers.LlamaForCausalLM, tokenizer, prompt: str) -> str:
    """Greedy continuation of `prompt` as text, via transformers `generate`."""
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=SAMPLE_NEW_TOKENS, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=False)


def run_lab(params: BuildParams, corpus: Corpus, out: Path, threads: int = 2) -> dict:
    """Builds tokenizer, target and draft into `out/target` and `out/draft`; returns the report.

    Args:
        params: build parameters.
        corpus: the split corpus (train files train; held-out files evaluate).
        out: existing empty folder.
        threads: torch intra-op threads (weights are reproducible for a fixed count).

    Raises:
        ValueError: the corpus is too small for the requested windows.
        FloatingPointError: training diverged.
    """
    wall, t0 = {}, time.perf_counter()
    with deterministic_torch(threads):
        gen = torch.Generator().manual_seed(params.seed)
        t = time.perf_counter()
        train_texts = [corpus.read(f) for f in corpus.train]
        tokenizer = train_tokenizer(train_texts, params.vocab_size, params.max_position_embeddings)
        train_stream = TokenStream.encode(tokenizer, train_texts)
        heldout_stream = TokenStream.encode(tokenizer, [corpus.read(f) for f in corpus.heldout])
        wall["tokenizer_s"] = time.perf_counter() - t

        target_cfg = llama_config(params.target_shape, tokenizer, params.max_position_embeddings)
        t = time.perf_counter()
        target = new_llama(target_cfg, params.seed)
        if params.bigram_init:
            init_from_bigram(target, train_stream.ids, params.seed, params.bigram_smoothing)
        wall["target_init_s"] = time.perf_counter() - t
        target_stats = train(
            target, lambda: train_stream.random_windows(params.batch_size, params.seq_len + 1, gen),
            lambda b: target(input_ids=b, labels=b).loss,
            Schedule(params.target_steps, params.target_lr, params.warmup_steps), desc="target")
        target.requires_grad_(False)

        t = time.perf_counter()
        chat_turn = chat_turn_ids(tokenizer)
        written = write_sequences(target, train_stream, params.distill_sequences,
                                  params.distill_prompt_len, params.seq_len - params.distill_prompt_len,
                                  params.distill_temperatures, gen, params.distill_prompt_formats,
                                  chat_turn)
        wall["distill_set_s"] = time.perf_counter() - t

        draft_cfg = llama_config(params.draft_shape, tokenizer, params.max_position_embeddings)
        draft = new_llama(draft_cfg, params.seed + 1)
        if params.bigram_init:
            init_from_bigram(draft, train_stream.ids, params.seed + 1, params.bigram_smoothing)
        draft_stats = train(draft, mixed_batches(train_stream, written, params.batch_size, gen),
                            kl_loss(draft, target),
                            Schedule(params.draft_steps, params.draft_lr, params.warmup_steps),
                            desc="draft")

        t = time.perf_counter()
        windows = heldout_stream.spaced_windows(params.eval_windows, params.seq_len + 1)
        prompts = heldout_stream.spaced_windows(params.eval_prompts, params.eval_prompt_len)
        losses = {"target": heldout_loss(target, windows), "draft": heldout_loss(draft, windows)}
        agreement = greedy_agreement(draft, target, prompts, params.eval_new_tokens,
                                     params.speculative_k)
        # the same held-out windows as user turns of the chat template, as the chat API serves them
        agreement_chat = greedy_agreement(draft, target, wrap_chat_turns(prompts, chat_turn),
                                          params.eval_new_tokens, params.speculative_k)
        samples = {name: _sample(m, tokenizer, SAMPLE_PROMPT)
                   for name, m in (("target", target), ("draft", draft))}
        wall["evaluation_s"] = time.perf_counter() - t

        for name, model in (("target", target), ("draft", draft)):
            model.save_pretrained(out / name)
            tokenizer.save_pretrained(out / name)

    corpus_info = corpus.describe()
    models = {}
    for name, cfg, stats in (("target", target_cfg, target_stats), ("draft", draft_cfg, draft_stats)):
        models[name] = {"params": param_counts(cfg), "flops_per_token": flops_per_token(cfg),
                        "heldout_loss_nats": losses[name],
                        "train": {**asdict(stats), "tokens_per_s": stats.tokens_per_s},
                        "shape": asdict(getattr(params, f"{name}_shape"))}
    wall["target_train_s"], wall["draft_train_s"] = target_stats.wall_s, draft_stats.wall_s
    wall["total_s"] = time.perf_counter() - t0
    flops_ratio = models["draft"]["flops_per_token"] / models["target"]["flops_per_token"]
    return {
        "corpus": corpus_info,
        "tokenizer": {"vocab_size": len(tokenizer), "train_tokens": len(train_stream),
                      "heldout_tokens": len(heldout_stream),
                      "train_bytes_per_token": corpus_info["train_bytes"] / len(train_stream)},
        "models": models,
        "flops_ratio_draft_to_target": flops_ratio,
        "agreement": agreement.as_dict(),
        "agreement_chat": agreement_chat.as_dict(),
        "samples": {"prompt": SAMPLE_PROMPT, **samples},
        "wall_s": wall,
        "threads": threads,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
