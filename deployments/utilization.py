"""Memory-bound utilization of one replica, behind one interface (`UtilizationSource.read`).

The autoscaler asks of each replica one question: of its engine's time, what fraction goes to work
that does not grow with the batch (reading the weights, per-step overhead): the memory-bound
fraction m in [0, 1]. Near 1, one more sequence in the batch is almost free, and so is speculation
(../shared/DESIGN.md §2: Leviathan's speedup holds only while memory-bound). Near 0, the replica is
compute-bound: every extra token costs in proportion, and speculation's rejected tokens are waste.

Two sources:

- `EngineUtilization` (CPU, or any engine with a step-time profile): roofline reading of the
  profiled step-time curve. Model one engine step at running batch B as T(B) = a + b·B (a: the
  batch-independent part, weights and overhead; b: per-sequence compute), fitted locally from the
  step-time model at B and 2B: b = (T(2B) − T(B)) / B, a = T(B) − b·B. Then
  m(B) = a / T(B) = 1 − d ln T / d ln B, the share of the step that one more sequence does not
  grow (roofline, Williams et al. 2009; the batch-1 vs batch-B cost curve of DESIGN.md §3). B is
  the engine's running batch now (at least 1).
- `DcgmUtilization` (GPU): DCGM profiling fields from a dcgm-exporter `/metrics` endpoint,
  `DCGM_FI_PROF_DRAM_ACTIVE` (fraction of cycles the memory interface moves data) and
  `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE` (fraction of cycles the tensor pipes work), each averaged over
  the replica's tensor-parallel GPUs; m = dram / (dram + tensor). NVML's memory "utilization" is
  a duty cycle near 100% under any decode load, so it is not used (DESIGN.md §3).

Either returns None when it cannot tell (no profile, exporter down): the policy then holds.
"""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass
from typing import Callable, Protocol

from core import StepTimeModel


@dataclass(frozen=True, slots=True)
class Utilization:
    """One reading: `memory_bound` in [0, 1] (1: fully memory/overhead-bound)."""

    memory_bound: float


class UtilizationSource(Protocol):
    """Reads one replica's memory-bound utilization now; None when unknown. `blocking`: `read`
    waits on I/O (run it off the event loop)."""

    blocking: bool

    def read(self) -> Utilization | None: ...


def memory_bound_fraction(model: StepTimeModel, batch: float) -> float | None:
    """m(B) = a / T(B) from the local linear fit T(B) = a + b·B between B and 2B (module doc).

    Returns None before the model knows any step time.
    """
    b_now = max(batch, 1.0)
    t_now, t_double = model.step_time(b_now), model.step_time(2 * b_now)
    if t_now is None or t_double is None or t_now <= 0:
        return None
    per_seq = max(0.0, (t_double - t_now) / b_now)  # b, seconds per sequence per step
    fixed = max(0.0, t_now - per_seq * b_now)  # a, seconds per step whatever the batch
    return min(1.0, fixed / t_now)


class EngineUtilization:
    """Memory-bound fraction from engine stats and the profiled step times (module doc).

    Args:
        model: the replica's step-time model (profile at start, online samples after).
        running_batch: returns the engine's running batch now (vLLM num_requests_running).
    """

    blocking = False  # arithmetic on the replica's own step-time model

    def __init__(self, model: StepTimeModel, running_batch: Callable[[], float]):
        self._model = model
        self._running_batch = running_batch

    def read(self) -> Utilization | None:
        m = memory_bound_fraction(self._model, self._running_batch())
        return None if m is None else Utilization(m)


_SAMPLE = re.compile(
    r'^(DCGM_FI_PROF_DRAM_ACTIVE|DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)\{([^}]*)\}\s+(\S+)')
_GPU_LABEL = re.compile(r'(?:^|,)gpu="([^"]*)"')


def parse_dcgm(text: str, gpus: set[str] | None) -> dict[str, list[float]]:
    """{field: [value per GPU]} of the two profiling fields in dcgm-exporter's text format.

    Args:
        text: the exporter's `/metrics` body.
        gpus: GPU indices (the exporter's `gpu` label) of the replica; None: every GPU listed.
    """
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        gpu = _GPU_LABEL.search(m.group(2))
        if gpus is not None and (gpu is None or gpu.group(1) not in gpus):
            continue
        out.setdefault(m.group(1), []).append(float(m.group(3)))
    return out


class DcgmUtilization:
    """Memory-bound fraction from dcgm-exporter's profiling fields (module doc).

    Args:
        url: the exporter's `/metrics` URL on the replica's node.
        gpus: the replica's tensor-parallel GPU indices; None: all GPUs the exporter lists.
        timeout_s: HTTP timeout per read.
    """

    blocking = True  # an HTTP read of the exporter

    def __init__(self, url: str, gpus: list[str] | None = None, timeout_s: float = 1.0):
        self._url = url
        self._gpus = None if gpus is None else {str(g) for g in gpus}
        self._timeout_s = timeout_s

    def read(self) -> Utilization | None:
        try:
            with urllib.request.urlopen(self._url, timeout=self._timeout_s) as r:
                fields = parse_dcgm(r.read().decode(), self._gpus)
        except OSError:
            return None
        dram = fields.get("DCGM_FI_PROF_DRAM_ACTIVE")
        tensor = fields.get("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
        if not dram or not tensor:
            return None
        dram_mean, tensor_mean = sum(dram) / len(dram), sum(tensor) / len(tensor)
        if dram_mean + tensor_mean <= 0:
            return None  # idle GPUs say nothing about where the work would sit
        return Utilization(dram_mean / (dram_mean + tensor_mean))


_SOURCES: dict[str, Callable[..., UtilizationSource]] = {
    "engine": lambda *, model, running_batch, dcgm_url, gpus:
        EngineUtilization(model, running_batch),
    "dcgm": lambda *, model, running_batch, dcgm_url, gpus: DcgmUtilization(dcgm_url, gpus),
}


def make_source(kind: str, *, model: StepTimeModel, running_batch: Callable[[], float],
                dcgm_url: str, gpus: list[str] | None = None) -> UtilizationSource:
    """The utilization source named `kind` (`engine` or `dcgm`, config `utilization_source`).

    Raises:
        KeyError: an unknown kind.
    """
    return _SOURCES[kind](model=model, running_batch=running_batch, dcgm_url=dcgm_url, gpus=gpus)
