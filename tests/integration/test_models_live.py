"""Tests of the model lab (models/): tiny real builds on a sample of the stdlib, no vLLM. Its pure
parts: tests/unit/test_models.py."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, LlamaForCausalLM

import models.build
import models.lab
from models.build import build, main
from models.params import BuildParams, LlamaShape
from models.tokenizer import BOS, END_OF_TURN, ROLE_TOKENS

# Tiny models gain nothing from a second thread, and OpenMP threads stall on a busy machine.
TINY = BuildParams(
    vocab_size=512, target_shape=LlamaShape(64, 2, 2, 128), draft_shape=LlamaShape(32, 1, 1, 64),
    seq_len=64, batch_size=4, target_steps=6, draft_steps=4, warmup_steps=2, distill_sequences=8,
    distill_prompt_len=16, max_files=40, heldout_fraction=0.2, eval_windows=4, eval_prompts=4,
    eval_prompt_len=8, eval_new_tokens=16)


@pytest.fixture(scope="module")
def tiny_lab(tmp_path_factory) -> Path:
    """One tiny build shared by the read-only tests below."""
    out = tmp_path_factory.mktemp("lab") / "models"
    result = build(out, TINY, threads=1)
    assert not result.cached
    return out


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def test_build_writes_complete_hf_layout(tiny_lab: Path):
    for name in ("target", "draft"):
        files = {p.name for p in (tiny_lab / name).iterdir()}
        assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                "tokenizer_config.json"} <= files
        model = LlamaForCausalLM.from_pretrained(tiny_lab / name)
        assert model.config.tie_word_embeddings is False
    assert (tiny_lab / "manifest.json").is_file()
    assert not list(tiny_lab.parent.glob(".models.*")), "partial folder left behind"


def test_same_seed_gives_identical_weights_and_other_seed_differs(tiny_lab: Path, tmp_path: Path):
    again = build(tmp_path / "again", TINY, threads=1)
    assert not again.cached
    for name in ("target", "draft"):
        assert (tiny_lab / name / "model.safetensors").read_bytes() == \
            (tmp_path / "again" / name / "model.safetensors").read_bytes()
        assert (tiny_lab / name / "tokenizer.json").read_bytes() == \
            (tmp_path / "again" / name / "tokenizer.json").read_bytes()
    build(tmp_path / "other", replace(TINY, seed=1), threads=1)
    a, b = _tensors(tiny_lab / "target"), _tensors(tmp_path / "other" / "target")
    assert a.keys() == b.keys()
    assert not torch.equal(a["model.embed_tokens.weight"], b["model.embed_tokens.weight"])


def test_second_build_is_cached_and_force_rebuilds(tiny_lab: Path, capsys):
    before = (tiny_lab / "target" / "model.safetensors").stat().st_mtime_ns
    result = build(tiny_lab, TINY, threads=1)
    assert result.cached
    assert result.report == json.loads((tiny_lab / "report.json").read_text())
    assert (tiny_lab / "target" / "model.safetensors").stat().st_mtime_ns == before
    # A different parameter set is a different build.
    assert build(tiny_lab, replace(TINY, draft_steps=5), threads=1).cached is False
    assert build(tiny_lab, TINY, threads=1).cached is False
    assert build(tiny_lab, TINY, force=True, threads=1).cached is False
    assert build(tiny_lab, TINY, threads=1).cached is True


def test_failed_build_leaves_previous_output_untouched(tiny_lab: Path, monkeypatch):
    manifest_before = (tiny_lab / "manifest.json").read_text()

    def crash(params, corpus, out, threads):
        (out / "target").mkdir()
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(models.lab, "run_lab", crash)
    with pytest.raises(RuntimeError, match="killed"):
        build(tiny_lab, TINY, force=True, threads=1)
    assert (tiny_lab / "manifest.json").read_text() == manifest_before
    assert not list(tiny_lab.parent.glob(".models.*"))


def test_draft_and_target_share_vocab_and_tokenizer(tiny_lab: Path):
    target_cfg = json.loads((tiny_lab / "target" / "config.json").read_text())
    draft_cfg = json.loads((tiny_lab / "draft" / "config.json").read_text())
    assert target_cfg["vocab_size"] == draft_cfg["vocab_size"]
    assert draft_cfg["hidden_size"] < target_cfg["hidden_size"]
    assert (tiny_lab / "target" / "tokenizer.json").read_bytes() == \
        (tiny_lab / "draft" / "tokenizer.json").read_bytes()
    tok = AutoTokenizer.from_pretrained(tiny_lab / "target")
    assert len(tok) == target_cfg["vocab_size"]
    assert _tensors(tiny_lab / "draft")["lm_head.weight"].shape[0] == target_cfg["vocab_size"]
    ids = tok("def f(x):\n    return x").input_ids
    assert ids[0] == tok.bos_token_id == target_cfg["bos_token_id"]
    assert tok.decode(ids, skip_special_tokens=True) == "def f(x):\n    return x"


def test_chat_template_renders(tiny_lab: Path):
    tok = AutoTokenizer.from_pretrained(tiny_lab / "draft")
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Add 2+2."}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == f"{BOS}<|system|>\nBe terse.{END_OF_TURN}\n<|user|>\nAdd 2+2.{END_OF_TURN}\n<|assistant|>\n"
    no_prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert not no_prompt.endswith("<|assistant|>\n")
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert ids.count(tok.bos_token_id) == 1
    for special in ROLE_TOKENS[:2] + (END_OF_TURN,):
        assert tok.convert_tokens_to_ids(special) in ids
    with pytest.raises(Exception, match="role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_report_holds_sizes_losses_and_agreement(tiny_lab: Path):
    report = json.loads((tiny_lab / "report.json").read_text())
    t, d = report["models"]["target"], report["models"]["draft"]
    assert d["params"]["total"] < t["params"]["total"]
    ratio = d["flops_per_token"] / t["flops_per_token"]
    assert report["flops_ratio_draft_to_target"] == pytest.approx(ratio)
    for r in (t, d):
        assert 0 < r["heldout_loss_nats"] < math.log(report["tokenizer"]["vocab_size"]) + 1
        assert r["train"]["steps"] > 0 and r["train"]["wall_s"] > 0
    assert t["train"]["steps"] == TINY.target_steps and d["train"]["steps"] == TINY.draft_steps
    for a in (report["agreement"], report["agreement_chat"]):  # raw and chat-turn prompts
        assert 0 <= a["alpha"] <= 1 and a["positions"] == TINY.eval_prompts * TINY.eval_new_tokens
        assert 1 <= a["mean_acceptance_length"] <= 1 + TINY.speculative_k
    assert report["corpus"]["files"] == TINY.max_files and report["corpus"]["licence"].startswith("PSF")


def test_cli_builds_then_reports_cached(tmp_path: Path, monkeypatch, capsys):
    # The CLI starts from BuildParams() defaults (the 10-minute build); swap in the tiny ones.
    monkeypatch.setattr(models.build, "BuildParams", lambda: replace(TINY, max_files=None))
    argv = ["--out", str(tmp_path / "cli"), "--target-steps", "3", "--draft-steps", "2",
            "--max-files", "40", "--threads", "1"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "cached" not in first and "draft/target FLOPs per token" in first
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("cached:")
    report = json.loads((tmp_path / "cli" / "report.json").read_text())
    assert report["params"]["target_steps"] == 3 and report["params"]["draft_steps"] == 2
