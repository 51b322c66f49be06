"""The CPU a node runs on: its feature flags and what an engine's `dtype: auto` should mean there.
"""

from __future__ import annotations

from pathlib import Path

# CPU flags of a native bfloat16 matmul path (x86: AVX512-BF16, AMX-BF16; Arm: BF16). Without
# one, bfloat16 is emulated: on this project's 2-core AMD EPYC (AVX2 only) vLLM's `dtype: auto`
# picked bfloat16 for the tiny target and decoded 535 / 616 tok/s at batch 16 / 64 against
# 1418 / 2457 in float32 (one core, eager, 128 tokens, 2026-12-04; 152 vs 160 at batch 1).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def _cpuinfo_fields(cpuinfo: str | None) -> dict[str, str]:
    """{field: value} of /proc/cpuinfo (or the given text), the first processor's value of each
    field; empty where it cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (`flags` on x86, `Features` on Arm) from /proc/cpuinfo (or the
    given text); empty where it cannot be read."""
    fields = _cpuinfo_fields(cpuinfo)
    return set((fields.get("flags") or fields.get("Features") or "").split())


def cpu_model_name(cpuinfo: str | None = None) -> str:
    """The processor's model name (`model name` on x86, else `Hardware` / `CPU part` lines on
    Arm) from /proc/cpuinfo (or the given text); "" where it cannot be read."""
    fields = _cpuinfo_fields(cpuinfo)
    return next((fields[k] for k in ("model name", "Hardware", "CPU part") if fields.get(k)), "")


def cpu_auto_dtype(flags: set[str] | None = None) -> str:
    """What a CPU engine's `dtype: auto` should mean on this node: "auto" (vLLM's choice,
    bfloat16 for a bfloat16 checkpoint) where the CPU has a native bfloat16 path
    (`NATIVE_BF16_FLAGS`), else "float32" (emulated bfloat16 runs 2.7-4x slower at batch 16-64,
    measured above)."""
    flags = cpu_flags() if flags is None else flags
    return "auto" if flags & NATIVE_BF16_FLAGS else "float32"


def served_dtype(dtype: str, accelerator: str) -> str:
    """The dtype a pool's engine runs with `dtype` from the config on `accelerator` ("cpu" or a
    GPU kind) on this node: on CPU, "auto" becomes `cpu_auto_dtype()`; anything else is kept."""
    return cpu_auto_dtype() if dtype == "auto" and accelerator == "cpu" else dtype
