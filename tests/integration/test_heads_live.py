"""Speculator heads (models.heads): deterministic short training, vLLM layouts, atomic builds; and,
with real vLLM engines (marker `engine`), losslessness and trained-vs-untrained acceptance of the
default EAGLE-3 and Medusa heads on held-out prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import PreTrainedTokenizerFast

from models import head_lab
from models.eagle1 import Eagle1Head
from models.eagle3 import Eagle3Head
from models.head_data import HeadData, chat_turn_ids, target_logprobs, write_sequences
from models.head_params import HeadParams
from models.head_train import agreement, chain_acceptance
from models.heads import DEFAULT_KINDS, HEAD_KINDS, build_heads
from models.medusa import MedusaHeads
from models.stream import TokenStream

TINY = HeadParams(sequences=4, prompt_len=16, new_tokens=24, eval_sequences=2, eagle3_steps=2,
                  eagle_steps=2, medusa_steps=2, ttt_steps=3, medusa_heads=3, batch_size=2, warmup_steps=1)


def _tensors(folder: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


@pytest.fixture(scope="module")
def tiny_build(lab, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("heads")
    build_heads(Path(lab), TINY, kinds=HEAD_KINDS, out=out)
    return out


def test_short_training_is_deterministic_and_cached(lab, tiny_build, tmp_path):
    again = build_heads(Path(lab), TINY, kinds=HEAD_KINDS, out=tmp_path)
    for kind in HEAD_KINDS:
        assert ((tmp_path / kind / "model.safetensors").read_bytes()
                == (tiny_build / kind / "model.safetensors").read_bytes())
        assert not again[kind].get("cached")
    assert all(r["cached"] for r in build_heads(Path(lab), TINY, kinds=HEAD_KINDS,
                                                 out=tmp_path).values())


def test_other_seed_gives_other_weights(lab, tiny_build, tmp_path):
    from dataclasses import replace
    build_heads(Path(lab), replace(TINY, seed=1), kinds=("medusa",), out=tmp_path)
    assert ((tmp_path / "medusa" / "model.safetensors").read_bytes()
            != (tiny_build / "medusa" / "model.safetensors").read_bytes())


def test_eagle3_export_is_vllm_layout(lab, tiny_build):
    target = json.loads((Path(lab) / "target" / "config.json").read_text())
    h, v = target["hidden_size"], target["vocab_size"]
    cfg = json.loads((tiny_build / "eagle3" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["draft_vocab_size"] == v == cfg["vocab_size"] and cfg["target_hidden_size"] == h
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert len(set(ids)) == 3 and max(ids) <= target["num_hidden_layers"]
    shapes = _tensors(tiny_build / "eagle3")
    assert shapes["fc.weight"] == (h, 3 * h) and shapes["lm_head.weight"] == (v, h)
    assert shapes["midlayer.self_attn.q_proj.weight"] == (h, 2 * h)
    assert {"midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",
            "midlayer.post_attention_layernorm.weight", "norm.weight",
            "midlayer.mlp.gate_proj.weight"} <= shapes.keys()
    # Full draft vocab: vLLM refuses a d2t then; embed_tokens absent: the target's is shared.
    assert not any("d2t" in k or "embed_tokens" in k for k in shapes)


def test_eagle31_export_is_the_eagle3_layout_with_its_norms(lab, tiny_build):
    """EAGLE 3.1: the EAGLE-3 checkpoint plus one RMSNorm per fused aux layer and the two flags
    vLLM's llama_eagle3 reads; an EAGLE-3 checkpoint has neither."""
    h = json.loads((Path(lab) / "target" / "config.json").read_text())["hidden_size"]
    cfg = json.loads((tiny_build / "eagle31" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["fc_norm"] is True and cfg["norm_output"] is True
    shapes, plain = _tensors(tiny_build / "eagle31"), _tensors(tiny_build / "eagle3")
    n_aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    assert shapes == {**plain, **{f"fc_norm.{i}.weight": (h,) for i in range(n_aux)}}
    assert "fc_norm" not in json.loads((tiny_build / "eagle3" / "config.json").read_text())


def test_eagle1_export_is_vllm_layout(lab, tiny_build):
    target = json.loads((Path(lab) / "target" / "config.json").read_text())
    h = target["hidden_size"]
    cfg = json.loads((tiny_build / "eagle" / "config.json").read_text())
    assert cfg["architectures"] == ["EagleLlamaForCausalLM"] and cfg["num_hidden_layers"] == 1
    shapes = _tensors(tiny_build / "eagle")
    assert shapes["fc.weight"] == (h, 2 * h)
    assert shapes["layers.0.self_attn.q_proj.weight"] == (h, h)
    # No input_layernorm (vLLM replaces it by Identity); embed and lm_head are the target's.
    assert all(k.startswith(("fc.", "layers.0.")) and "input_layernorm" not in k for k in shapes)


def test_medusa_export_is_vllm_layout(lab, tiny_build):
    target = json.loads((Path(lab) / "target" / "config.json").read_text())
    h, v = target["hidden_size"], target["vocab_size"]
    cfg = json.loads((tiny_build / "medusa" / "config.json").read_text())
    assert cfg == {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": h,
                   "vocab_size": v, "num_heads": TINY.medusa_heads, "num_hidden_layers": 1}
    shapes = _tensors(tiny_build / "medusa")
    assert shapes == {**{f"blocks.{i}.layers.0.weight": (h, h) for i in range(TINY.medusa_heads)},
                      **{f"lm_heads.{i}.weight": (v, h) for i in range(TINY.medusa_heads)}}


def test_failed_build_leaves_no_head_folder(lab, tmp_path, monkeypatch):
    def boom(*_a, **_k):
        raise FloatingPointError("diverged")
    monkeypatch.setattr(head_lab, "train_heads", boom)
    with pytest.raises(FloatingPointError):
        build_heads(Path(lab), TINY, out=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_unrolled_steps_are_causal(lab):
    """Step j's prediction at anchor i depends on no token after i + j + 1 (what vLLM has then)."""
    target = head_lab.load_target(Path(lab))
    head = Eagle3Head(target, (2, 4, 6), seed=0).eval()
    torch.manual_seed(0)
    ids = torch.randint(3, 4000, (1, 12))
    aux = torch.randn(1, 12, 3 * target.config.hidden_size)
    changed_ids, changed_aux = ids.clone(), aux.clone()
    changed_ids[0, 8:], changed_aux[0, 8:] = 5, 0.0
    with torch.no_grad():
        a, b = head.unrolled(aux, ids, 3), head.unrolled(changed_aux, changed_ids, 3)
    for j in range(3):
        last = 8 - j - 2  # anchors i with i + j + 1 <= 7 saw only unchanged tokens
        assert torch.allclose(a[j][0, :last + 1], b[j][0, :last + 1], atol=1e-5)
        assert not torch.allclose(a[j][0, last + 1:], b[j][0, last + 1:])


def test_chat_rows_are_chat_turns_of_prompt_len(lab):
    """Every other row's prompt is a corpus window inside one user turn of the chat template,
    generation prompt included; raw rows are plain corpus windows; all prompts prompt_len long."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(Path(lab) / "target")
    prefix, suffix = chat_turn_ids(tokenizer)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hello"}],
                                         add_generation_prompt=True, tokenize=True,
                                         return_dict=False) == (
        prefix + tokenizer("hello", add_special_tokens=False).input_ids + suffix)
    target = head_lab.load_target(Path(lab))
    stream = TokenStream(torch.arange(10, 400))
    rows = write_sequences(target, stream, 4, 16, 2, (0.0,), torch.Generator().manual_seed(0),
                           ("raw", "chat"), (prefix, suffix))
    assert rows.shape == (4, 18)
    for raw, chat in ((rows[0], rows[1]), (rows[2], rows[3])):
        assert raw[:16].tolist() == list(range(raw[0].item(), raw[0].item() + 16))
        body = chat[len(prefix):16 - len(suffix)].tolist()
        assert chat[:16].tolist() == prefix + body + suffix
        assert body == list(range(body[0], body[0] + len(body)))


def test_chain_acceptance_counts_as_vllm_does(lab):
    """A head right at one phase of a period-2 pattern: `agreement` says 0.5 per position, the walk
    vLLM makes locks into the good phase for draft 1 and never accepts draft 2."""
    target = head_lab.load_target(Path(lab))
    ids = torch.randint(3, 4000, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        final = target.model(input_ids=ids).last_hidden_state
    data = HeadData(ids, final, final)
    good = target_logprobs(target, final)  # [1, T, V]; step j at anchor a is scored at a + j + 1
    logits = []
    for j in range(2):
        lg = torch.cat([good[:, j + 1:], good[:, :j + 1]], 1).clone()
        odd = [a for a in range(20) if (a + j) % 2]
        lg[0, odd] = -good[0, odd]  # wrong argmax where a + j is odd
        logits.append(lg)
    assert agreement(logits, target, data)["alpha"] == pytest.approx([0.5, 0.5], abs=0.06)
    # L = 5: anchor 3 fails; then anchors 4, 6, ..., 16 accept draft 1 only (L + 2 <= 20)
    chain = chain_acceptance(logits, target, data, start=4)
    assert chain == {"alpha": [0.875, 0.0], "mean_acceptance_length": 1.875, "drafts": 8}


# ---- through vLLM (slow): the default heads, one spawned engine per checkpoint ----

MAX_TOKENS = 48


@pytest.fixture(scope="module")
def heads(lab) -> dict[str, dict]:
    return build_heads(Path(lab))  # the default kinds, as `make models` builds them


@pytest.fixture(scope="module")
def held_out(lab):
    from models.speculators_report import heldout_prompts, token_prompts
    rows = [r for r in heldout_prompts(2) if r["task"] in ("code", "chat")]
    return token_prompts(Path(lab) / "target", rows), [r["task"] for r in rows]


def _run(lab, spec, held_out):
    """float32: greedy speculative output equals vanilla exactly only where numerics cannot flip a
    near-tie; in bfloat16 a target built on one machine had such a tie at token 16 of a code
    prompt, where the verification pass (k + 1 positions at once) and a decode step disagreed."""
    from models.speculators_report import run_engine
    return run_engine(str(Path(lab) / "target"), spec, held_out[0], held_out[1], MAX_TOKENS,
                      dtype="float32")


def _accepted(result) -> tuple[int, int]:
    c = [e["counters"] for e in result["per_task"].values()]
    return sum(x.get("num_accepted_tokens", 0) for x in c), sum(x.get("num_drafts", 0) for x in c)


@pytest.fixture(scope="module")
def vanilla(lab, held_out):
    return _run(lab, None, held_out)["outputs"]


@pytest.mark.engine
@pytest.mark.parametrize("kind", DEFAULT_KINDS)
def test_trained_head_is_lossless_and_beats_untrained(lab, heads, held_out, vanilla, kind, tmp_path):
    params = HeadParams()
    k = params.medusa_heads if kind == "medusa" else 4
    trained = _run(lab, {"method": kind, "model": str(Path(lab) / kind),
                         "num_speculative_tokens": k}, held_out)
    assert trained["outputs"] == vanilla
    target = head_lab.load_target(Path(lab))
    if kind == "medusa":
        MedusaHeads(target, params.medusa_heads).export(tmp_path)
    else:
        Eagle3Head(target, params.aux_layer_ids, seed=0).export(tmp_path, target.config)
    base = _run(lab, {"method": kind, "model": str(tmp_path), "num_speculative_tokens": k}, held_out)
    assert base["outputs"] == vanilla
    (acc, drafts), (acc0, drafts0) = _accepted(trained), _accepted(base)
    per_draft, per_draft0 = acc / drafts, acc0 / max(drafts0, 1)
    # An untrained EAGLE-3 head accepts ~nothing; untrained Medusa heads repeat the target's
    # next-token guess (0.23 per draft with a lab built on 2026-12-02, trained 0.59; other
    # builds: models/README.md). Trained must at least double it and add a quarter token.
    assert per_draft >= 2 * per_draft0 and per_draft >= per_draft0 + 0.25, (per_draft, per_draft0)


@pytest.mark.engine
def test_eagle1_layout_loads_in_vllm_and_is_lossless(lab, held_out, vanilla, tmp_path):
    """EAGLE-1 is opt-in (not in `make models`): an untrained head of the exported shape checks
    that vLLM loads the layout and stays lossless."""
    target = head_lab.load_target(Path(lab))
    Eagle1Head(target, seed=0).export(tmp_path, target.config)
    result = _run(lab, {"method": "eagle", "model": str(tmp_path), "num_speculative_tokens": 3},
                  held_out)
    assert result["outputs"] == vanilla
    assert _accepted(result)[1] > 0  # it drafted
