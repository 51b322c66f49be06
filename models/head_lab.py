"""The heads pipeline: target-written data → target features → EAGLE-3 / EAGLE 3.1 / Medusa /
EAGLE-1 training → export.

Determinism: the data come from one `torch.Generator` seeded with `seed`, each head's batches from
its own (`seed + 1` EAGLE-3, `seed + 2` Medusa, `seed + 3` EAGLE-1, `seed + 4` EAGLE 3.1), head
init from `torch.manual_seed`, all under `torch.use_deterministic_algorithms(True)`: the same
parameters, target and thread count give byte-identical `model.safetensors`, whichever subset of
heads is built.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from models.corpus import load_corpus
from models.eagle1 import Eagle1Head
from models.eagle3 import Eagle3Head
from models.head_data import HeadData, chat_turn_ids, target_features, write_sequences
from models.head_params import HeadParams
from models.head_train import (eagle3_agreement, eagle3_loss, medusa_agreement, medusa_loss,
                               row_batches)
from models.lab import deterministic_torch
from models.medusa import MedusaHeads
from models.stream import TokenStream
from models.train import Schedule, TrainStats, train


def load_target(models: Path) -> LlamaForCausalLM:
    """The lab's target, float32, eval mode, frozen."""
    target = LlamaForCausalLM.from_pretrained(models / "target", dtype=torch.float32)
    return target.eval().requires_grad_(False)


@functools.lru_cache(maxsize=2)
def corpus_streams(target_dir: Path) -> tuple[TokenStream, TokenStream]:
    """(train, held-out) token streams of the corpus under the target's tokenizer; cached per
    process (encoding the train split takes seconds)."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(target_dir)
    corpus = load_corpus()
    return (TokenStream.encode(tokenizer, [corpus.read(f) for f in corpus.train]),
            TokenStream.encode(tokenizer, [corpus.read(f) for f in corpus.heldout]))


def make_data(target: LlamaForCausalLM, target_dir: Path, params: HeadParams
              ) -> tuple[HeadData, HeadData]:
    """(train, held-out) data: target-written sequences from train-split and held-out prompts.

    Held-out rows are greedy only (how vLLM drafts at temperature 0), in the same prompt formats.
    """
    train_stream, heldout_stream = corpus_streams(target_dir.resolve())
    chat_turn = chat_turn_ids(PreTrainedTokenizerFast.from_pretrained(target_dir))
    gen = torch.Generator().manual_seed(params.seed)
    ids = write_sequences(target, train_stream, params.sequences, params.prompt_len,
                          params.new_tokens, params.temperatures, gen, params.prompt_formats,
                          chat_turn)
    eval_ids = write_sequences(target, heldout_stream, params.eval_sequences, params.prompt_len,
                               params.new_tokens, (0.0,), gen, params.prompt_formats, chat_turn)
    return (target_features(target, ids, params.aux_layer_ids),
            target_features(target, eval_ids, params.aux_layer_ids))


def _train_report(stats: TrainStats) -> dict:
    return {**asdict(stats), "tokens_per_s": stats.tokens_per_s}


def train_eagle3(target: LlamaForCausalLM, data: HeadData, heldout: HeadData,
                 params: HeadParams, v31: bool = False) -> tuple[Eagle3Head, dict]:
    """Trains an EAGLE-3 head (EAGLE 3.1 with `v31`: same data, steps and learning rate) with
    training-time test; returns it and its report."""
    head = Eagle3Head(target, params.aux_layer_ids, params.seed, v31=v31)
    return head, _train_ttt(head, target, data, heldout, params, 4 if v31 else 1,
                            params.eagle3_steps, "eagle31" if v31 else "eagle3")


def train_eagle1(target: LlamaForCausalLM, data: HeadData, heldout: HeadData,
                 params: HeadParams) -> tuple[Eagle1Head, dict]:
    """Trains an EAGLE-1 head with training-time test; returns it and its report."""
    head = Eagle1Head(target, params.seed)
    return head, _train_ttt(head, target, data, heldout, params, 3, params.eagle_steps, "eagle")


def _train_ttt(head, target: LlamaForCausalLM, data: HeadData, heldout: HeadData,
               params: HeadParams, seed_offset: int, steps: int, desc: str) -> dict:
    """Training-time-test training of an EAGLE-style head in place; returns its report (held-out
    agreement before and after). `seed_offset` keeps each head's batch order its own."""
    before = eagle3_agreement(head, target, heldout, params.ttt_steps)
    stats = train(head, row_batches(data, params.batch_size,
                                    torch.Generator().manual_seed(params.seed + seed_offset)),
                  eagle3_loss(head, target, data, params.ttt_steps, params.ttt_decay),
                  Schedule(steps, params.eagle3_lr, params.warmup_steps), desc=desc)
    return {"train": _train_report(stats), "untrained_heldout": before,
            "heldout": eagle3_agreement(head, target, heldout, params.ttt_steps, params.prompt_len)}


def train_medusa(target: LlamaForCausalLM, data: HeadData, heldout: HeadData,
                 params: HeadParams) -> tuple[MedusaHeads, dict]:
    """Trains Medusa-1 heads on the frozen target; returns them and their report."""
    torch.manual_seed(params.seed)
    heads = MedusaHeads(target, params.medusa_heads)
    before = medusa_agreement(heads, target, heldout)
    stats = train(heads, row_batches(data, params.batch_size,
                                     torch.Generator().manual_seed(params.seed + 2)),
                  medusa_loss(heads, target, data),
                  Schedule(params.medusa_steps, params.medusa_lr, params.warmup_steps), desc="medusa")
    return heads, {"train": _train_report(stats), "untrained_heldout": before,
                   "heldout": medusa_agreement(heads, target, heldout)}


def train_heads(models: Path, params: HeadParams, dirs: dict[str, Path], threads: int = 1) -> dict:
    """Trains the heads named in `dirs` and exports each into its folder; returns their reports.

    Raises:
        FloatingPointError: training diverged.
    """
    with deterministic_torch(threads):
        t = time.perf_counter()
        target = load_target(models)
        data, heldout = make_data(target, models / "target", params)
        data_s = time.perf_counter() - t
        reports = {}
        for kind, out in dirs.items():
            t = time.perf_counter()
            if kind in ("eagle3", "eagle31"):
                head, report = train_eagle3(target, data, heldout, params, v31=kind == "eagle31")
                head.export(out, target.config)
            elif kind == "eagle":
                head, report = train_eagle1(target, data, heldout, params)
                head.export(out, target.config)
            else:
                head, report = train_medusa(target, data, heldout, params)
                head.export(out)
            reports[kind] = {**report, "threads": threads,
                             "wall_s": {"data_s": data_s, "head_s": time.perf_counter() - t},
                             "data": {"sequences": int(data.ids.shape[0]),
                                      "tokens": int(data.ids.numel())}}
    return reports
