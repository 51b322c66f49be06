"""`python -m models.widen`: the lab's weight-bound target, the same function as the trained one.

On a GPU a small-batch decode step is bound by reading the weights from memory: that is why
speculation pays there at small batch and costs at large batch. The lab's target (6.8 M parameters,
27 MB in float32) fits in this CPU's 32 MiB L3, so its steps are cheap and speculation pays at
every batch (issue 30). Widening it makes one core behave like the accelerator:

- every gated-MLP intermediate unit is copied `k` times: the rows of `gate_proj` and `up_proj`
  repeated, the columns of `down_proj` repeated and divided by `k`. Each copy computes the same
  activation `silu(g) * u`, and the down projection sums `k` copies of `1/k` of its contribution,
  so every hidden state is the original's up to float rounding (k a power of two divides
  exactly). The tokenizer, attention, norms and LM head are unchanged.
- Hence every speculator trained on the original (the lab's draft, EAGLE-3 and Medusa heads, which
  read the target's hidden states) fits the widened target as it is: the acceptance is the same.

Measured (our probe, `../shared/tools/probes/knee.py`, one core, bfloat16, compiled, greedy code
prompts, one run each): k = 32 gives 105 M parameters; vanilla 47 / 193 / 437 / 606 tok/s at
batch 1 / 4 / 16 / 64; n-gram 1.27 / 0.95 / 0.87 / 0.80x that, the lab's draft model
1.75 / 0.99 / 0.66 / 0.51x: the GPU's shape. The tiny target measured 156 / 634 / 1889 / 3616 tok/s
with the draft at 1.47 / 1.04 / 0.56 / 0.55x (issue 30).

Output: `<models>/target-wide` (Hugging Face layout, as `target/`) with `widen.json` recording the
source's digest and `k`; a second run with the same source and `k` returns at once ("cached").
Serve it with `model.path: ${models}/target-wide` (cluster/examples/wide.yaml).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import torch

from models.manifest import atomic_dir, default_models_dir, write_json

WIDEN_NAME = "widen.json"
WEIGHTS = "model.safetensors"
DEFAULT_K = 32


def widen_state(state: dict[str, torch.Tensor], k: int) -> dict[str, torch.Tensor]:
    """The state dict of a Llama checkpoint with each MLP intermediate unit copied `k` times.

    Shapes per layer (H hidden, I intermediate): gate_proj, up_proj [I, H] -> [k*I, H];
    down_proj [H, I] -> [H, k*I], divided by k. Every other tensor is returned as it is.

    Raises:
        ValueError: k < 1, or the state has no MLP projections to widen.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    out, widened = {}, 0
    for name, t in state.items():
        if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
            out[name] = t.repeat(k, 1).contiguous()
            widened += 1
        elif name.endswith("mlp.down_proj.weight"):
            out[name] = (t.repeat(1, k) / k).contiguous()
            widened += 1
        else:
            out[name] = t
    if not widened:
        raise ValueError("no mlp.{gate,up,down}_proj weights: not a Llama-style checkpoint")
    return out


def checkpoint_digest(src: Path) -> str:
    """sha256 of a checkpoint's config.json and weights (what a model derived from it, widened
    or quantized, is a function of)."""
    h = hashlib.sha256()
    for name in ("config.json", WEIGHTS):
        with open(src / name, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def widen(src: Path, dst: Path, k: int = DEFAULT_K, force: bool = False) -> tuple[Path, bool]:
    """Writes the target at `src` widened `k` times to `dst` (replaced atomically).

    Returns:
        (dst, cached): cached is True when `dst` already held this widening of this source.

    Raises:
        FileNotFoundError: `src` lacks config.json or model.safetensors (build the lab first:
            `make models`).
        ValueError: bad `k`, or `src` is not a Llama-style checkpoint.
    """
    from safetensors.torch import load_file, save_file

    for name in ("config.json", WEIGHTS):
        if not (src / name).is_file():
            raise FileNotFoundError(f"{src / name}: no lab target there (run `make models`)")
    record = {"source": str(src), "source_digest": checkpoint_digest(src), "k": k}
    try:
        old = json.loads((dst / WIDEN_NAME).read_text())
    except (OSError, ValueError):
        old = None
    if not force and old is not None and {n: old.get(n) for n in record} == record:
        return dst, True
    state = widen_state(load_file(src / WEIGHTS), k)
    cfg = json.loads((src / "config.json").read_text())
    cfg["intermediate_size"] *= k
    with atomic_dir(dst) as tmp:
        for f in src.iterdir():
            if f.is_file() and f.name not in (WEIGHTS, "config.json", WIDEN_NAME):
                shutil.copy(f, tmp / f.name)
        save_file(state, tmp / WEIGHTS, metadata={"format": "pt"})
        write_json(tmp / "config.json", cfg)
        params = sum(t.numel() for t in state.values())
        write_json(tmp / WIDEN_NAME, {**record, "intermediate_size": cfg["intermediate_size"],
                                      "parameters": params,
                                      "weight_bytes": sum(t.numel() * t.element_size()
                                                          for t in state.values())})
    return dst, False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `specserve models widen` (also `python -m models.widen`)."""
    p.add_argument("--src", type=Path, help="trained target (default <models>/target)")
    p.add_argument("--out", type=Path, help="output folder (default <models>/target-wide)")
    p.add_argument("--k", type=int, default=DEFAULT_K, help="copies of each MLP unit")
    p.add_argument("--force", action="store_true", help="rewrite even when cached")


def main(argv: list[str] | None = None) -> int:
    """`specserve models widen`: prints where the widened target is and its size."""
    p = argparse.ArgumentParser(prog="specserve models widen", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    if args.k < 1:
        p.error(f"--k: must be >= 1, got {args.k}")
    models = default_models_dir()
    try:
        dst, cached = widen(args.src or models / "target", args.out or models / "target-wide",
                            args.k, args.force)
    except (FileNotFoundError, ValueError) as e:  # --k is checked above: the source is at fault
        print(f"specserve models widen: --src: {e}", file=sys.stderr)
        return 2
    info = json.loads((dst / WIDEN_NAME).read_text())
    print(f"{dst}: k={info['k']}, intermediate_size {info['intermediate_size']}, "
          f"{info['parameters'] / 1e6:.1f} M parameters, {info['weight_bytes'] / 2**20:.0f} MiB"
          + (" (cached)" if cached else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
