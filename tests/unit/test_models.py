"""Pure parts of the model lab (models/): shapes and FLOPs, the held-out split, replayed
speculation, the learning-rate schedule, parameter checks. Tiny real builds:
tests/integration/test_models_live.py."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from models.corpus import is_heldout, load_corpus
from models.evaluation import replay_speculation
from models.llama import flops_per_token, param_counts
from models.params import BuildParams, LlamaShape
from models.train import Schedule


def test_default_draft_costs_at_most_a_fifth_of_target():
    p = BuildParams()
    cfg = {name: LlamaConfig(vocab_size=p.vocab_size, hidden_size=s.hidden_size,
                             num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads,
                             num_key_value_heads=s.num_heads, intermediate_size=s.intermediate_size,
                             tie_word_embeddings=False)
           for name, s in (("target", p.target_shape), ("draft", p.draft_shape))}
    assert flops_per_token(cfg["draft"]) / flops_per_token(cfg["target"]) <= 0.2
    model = LlamaForCausalLM(cfg["draft"])
    assert param_counts(cfg["draft"])["total"] == sum(x.numel() for x in model.parameters())


def test_heldout_split_is_stable_and_near_fraction():
    corpus = load_corpus()
    assert all(f.heldout == is_heldout(f.rel_path, 0.05) for f in corpus.files)
    share = len(corpus.heldout) / len(corpus.files)
    assert 0.02 < share < 0.10
    assert not any("/test/" in f"/{f.rel_path}" or "site-packages" in f.rel_path for f in corpus.files)


def test_replay_speculation_counts_accepted_runs():
    match = torch.tensor([True, True, False, True, True, True, True, True, False])
    steps, accepted, at_pos = replay_speculation(match, k=4)
    # Step 1 accepts indices 0-1, the target emits index 2; step 2 accepts 3-6 (k = 4 cap), the
    # target emits 7; step 3 accepts nothing, the target emits 8.
    assert (steps, accepted, at_pos) == (3, 6, [2, 2, 1, 1])


def test_schedule_warms_up_then_decays_to_floor():
    s = Schedule(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert s.lr_factor(0) == pytest.approx(0.1)
    assert s.lr_factor(9) == pytest.approx(1.0)
    assert s.lr_factor(100) == pytest.approx(0.1)
    assert all(s.lr_factor(i) >= s.lr_factor(i + 1) for i in range(10, 100))


def test_params_reject_bad_values():
    with pytest.raises(ValueError, match="seq_len"):
        BuildParams(seq_len=2048)
    with pytest.raises(ValueError, match="hidden_size"):
        LlamaShape(100, 1, 3, 64)
    with pytest.raises(ValueError, match="target_steps"):
        BuildParams(target_steps=-1)
    with pytest.raises(ValueError, match="distill_prompt_formats"):
        BuildParams(distill_prompt_formats=("raw", "system"))
    with pytest.raises(ValueError, match="distill_temperatures"):
        BuildParams(distill_temperatures=())


def test_a_built_model_folder_is_readable_by_every_user(tmp_path):
    import os
    import stat

    from models.manifest import atomic_dir

    out = tmp_path / "target"
    with atomic_dir(out) as partial:
        weights = partial / "model.safetensors"
        weights.write_bytes(b"x")
        os.chmod(weights, 0o600)  # as safetensors writes it
        (partial / "sub").mkdir(mode=0o700)
    assert stat.S_IMODE((out / "model.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((out / "sub").stat().st_mode) == 0o755


def test_widened_target_computes_the_same_function_and_is_cached(tmp_path):
    """models.widen: k copies of each MLP unit leave every hidden state and logit as they were
    (the speculators trained on the original fit it); a second run is cached; bad input refused."""
    from models.widen import WIDEN_NAME, widen, widen_state

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=24, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    src = tmp_path / "target"
    model.save_pretrained(src)
    assert (src / "model.safetensors").is_file()
    dst, cached = widen(src, tmp_path / "wide", k=4)
    assert not cached
    wide = LlamaForCausalLM.from_pretrained(dst).eval()
    assert wide.config.intermediate_size == 96
    assert wide.model.layers[0].mlp.down_proj.weight.shape == (32, 96)
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        a = model(ids, output_hidden_states=True)
        b = wide(ids, output_hidden_states=True)
    for ha, hb in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(hb, ha, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.logits, a.logits, rtol=1e-5, atol=1e-5)
    assert a.logits.argmax(-1).equal(b.logits.argmax(-1))
    assert widen(src, dst, k=4) == (dst, True)
    assert widen(src, dst, k=2)[1] is False  # another k rewrites
    assert json.loads((dst / WIDEN_NAME).read_text())["k"] == 2

    with pytest.raises(ValueError, match="k must be"):
        widen(src, tmp_path / "bad", k=0)
    with pytest.raises(FileNotFoundError, match="make models"):
        widen(tmp_path / "nowhere", tmp_path / "bad", k=2)
    with pytest.raises(ValueError, match="Llama"):
        widen_state({"lm_head.weight": torch.zeros(2, 2)}, 2)
    assert not (tmp_path / "bad").exists()
