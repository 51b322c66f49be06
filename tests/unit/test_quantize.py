"""models.quantize on a tiny synthetic Llama: the int8 W8A8 checkpoint's tensors, the config
vLLM's compressed-tensors parser reads, the int8 error bound, atomic writes and the cache. The
engine run on the lab's draft: bench/int8_draft.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from models.quantize import QUANTIZE_NAME, quantize_draft

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


@pytest.fixture
def draft(tmp_path):
    """A 2-layer float32 Llama (hidden 32, intermediate 24, vocab 64) saved as the lab saves one."""
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=24, tie_word_embeddings=False)
    torch.manual_seed(0)
    src = tmp_path / "draft"
    LlamaForCausalLM(cfg).save_pretrained(src)
    return src


def test_decoder_linears_become_int8_within_half_a_step(draft, tmp_path):
    """Each decoder Linear: int8 weight [out, in] + float32 scale [out, 1] = max|row| / 127.5,
    |q * scale - w| <= scale / 2 with the full int8 range used; everything else unchanged."""
    dst, cached = quantize_draft(draft, tmp_path / "draft-int8")
    assert not cached
    src, out = load_file(draft / "model.safetensors"), load_file(dst / "model.safetensors")
    quantized = {f"model.layers.{i}.{name}" for i in range(2) for name in LINEARS}
    assert {k.rsplit(".", 1)[0] for k in out if k.endswith(".weight_scale")} == quantized
    assert not [k for k in out if "zero_point" in k]  # symmetric: no zero points stored
    for layer in quantized:
        w, q, scale = src[f"{layer}.weight"], out[f"{layer}.weight"], out[f"{layer}.weight_scale"]
        assert q.dtype == torch.int8 and q.shape == w.shape
        assert scale.dtype == torch.float32 and scale.shape == (w.shape[0], 1)
        torch.testing.assert_close(scale, w.abs().amax(dim=1, keepdim=True) / 127.5)
        assert ((q.float() * scale - w).abs() <= scale / 2 + 1e-7).all()
        # the row's largest |w| lands on ±127.5 steps: 127, or -128 when it is negative
        assert q.int().abs().amax(dim=1).ge(127).all()
    for name in src.keys() - {f"{layer}.weight" for layer in quantized}:  # embeddings, lm_head
        assert out[name].dtype == torch.float32 and out[name].equal(src[name])
    info = json.loads((dst / QUANTIZE_NAME).read_text())
    assert info["quantized_linears"] == 14 and info["weight_bytes"] < info["source_weight_bytes"]


def test_vllm_parses_the_config_as_its_cpu_int8_scheme(draft, tmp_path):
    """vLLM's CompressedTensorsConfig maps every decoder Linear to CompressedTensorsW8A8Int8
    (per-channel weights, dynamic symmetric per-token inputs: CPUInt8ScaledMMLinearKernel on CPU)
    and leaves lm_head unquantized."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig)

    dst, _ = quantize_draft(draft, tmp_path / "draft-int8")
    cfg = json.loads((dst / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"
    assert {k: v for k, v in cfg.items() if k != "quantization_config"} == \
        json.loads((draft / "config.json").read_text())
    parsed = CompressedTensorsConfig.from_config(cfg["quantization_config"])
    for name in ("model.layers.0.self_attn.qkv_proj", "model.layers.1.mlp.down_proj"):
        scheme = parsed.get_scheme(torch.nn.Linear(2, 2), name)
        assert type(scheme).__name__ == "CompressedTensorsW8A8Int8"
        assert (scheme.strategy, scheme.is_static_input_scheme, scheme.input_symmetric) == \
            ("channel", False, True)
    assert parsed.get_scheme(torch.nn.Linear(2, 2), "lm_head") is None


def test_write_is_atomic_and_cached_by_source_digest(draft, tmp_path, monkeypatch):
    """Same source: cached; a failed write leaves the old folder and no partial one; a changed
    source or --force rewrites; a missing or non-Llama source is refused before writing."""
    import models.quantize as quantize

    dst = tmp_path / "draft-int8"
    quantize_draft(draft, dst)
    first = (dst / "model.safetensors").read_bytes()
    assert quantize_draft(draft, dst) == (dst, True)
    assert quantize_draft(draft, dst, force=True) == (dst, False)

    model = LlamaForCausalLM.from_pretrained(draft)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(2)
    model.save_pretrained(draft)  # a new source: its quantization differs from `first`
    record = (dst / QUANTIZE_NAME).read_text()

    def fail(path):
        raise OSError("disk full")

    monkeypatch.setattr(quantize, "tensor_bytes", fail)  # fails after the weights are written
    with pytest.raises(OSError, match="disk full"):
        quantize_draft(draft, dst)
    monkeypatch.undo()
    assert (dst / "model.safetensors").read_bytes() == first
    assert (dst / QUANTIZE_NAME).read_text() == record
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft", "draft-int8"]
    assert quantize_draft(draft, dst) == (dst, False)
    assert (dst / "model.safetensors").read_bytes() != first

    with pytest.raises(FileNotFoundError, match="make models"):
        quantize_draft(tmp_path / "nowhere", tmp_path / "bad")
    cfg = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt2",
                                                   "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match="not a Llama"):
        quantize_draft(draft, tmp_path / "bad")
    with pytest.raises(ValueError, match="already quantized"):
        quantize_draft(dst, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
