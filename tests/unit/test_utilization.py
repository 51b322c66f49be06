"""Utilization sources (deployments/utilization.py): the roofline reading of a step-time profile,
and DCGM profiling fields read over HTTP from a fake dcgm-exporter (no GPU here)."""

from __future__ import annotations

import pytest

from deployments.utilization import (DcgmUtilization, EngineUtilization, make_source,
                                     memory_bound_fraction, parse_dcgm)
from fakes.dcgm_exporter import FakeDcgmExporter, exporter_text
from core import StepTimeModel


def model_of(step_s) -> StepTimeModel:
    m = StepTimeModel()
    m.load_profile({b: step_s(b) for b in (1, 2, 4, 8, 16, 32, 64)})
    return m


@pytest.mark.parametrize("a, b, batch", [(0.010, 0.0001, 4), (0.010, 0.001, 8), (0.002, 0.001, 16)])
def test_memory_bound_fraction_of_a_linear_step_time(a, b, batch):
    # T(B) = a + b·B: the batch-independent share at B is a / (a + b·B)
    m = memory_bound_fraction(model_of(lambda n: a + b * n), batch)
    assert m == pytest.approx(a / (a + b * batch))


def test_flat_profile_is_memory_bound_and_proportional_is_compute_bound():
    assert memory_bound_fraction(model_of(lambda n: 0.01), 8) == pytest.approx(1.0)
    assert memory_bound_fraction(model_of(lambda n: 0.001 * n), 8) == pytest.approx(0.0)


def test_engine_source_reads_the_running_batch_and_needs_a_profile():
    batch = [1]
    src = EngineUtilization(model_of(lambda n: 0.01 + 0.001 * n), lambda: batch[0])
    low_batch = src.read().memory_bound
    batch[0] = 32
    assert src.read().memory_bound < low_batch
    assert EngineUtilization(StepTimeModel(), lambda: 4).read() is None


def test_parse_dcgm_keeps_profiling_fields_of_the_replicas_gpus():
    text = exporter_text({"0": (0.8, 0.1), "1": (0.6, 0.3), "2": (0.1, 0.9)})
    fields = parse_dcgm(text, {"0", "1"})
    assert fields == {"DCGM_FI_PROF_DRAM_ACTIVE": [0.8, 0.6],
                      "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": [0.1, 0.3]}


def test_dcgm_source_averages_over_tensor_parallel_gpus():
    with FakeDcgmExporter({"0": (0.8, 0.1), "1": (0.6, 0.3), "4": (0.0, 1.0)}) as url:
        reading = DcgmUtilization(url, gpus=["0", "1"]).read()
        # dram mean 0.7, tensor mean 0.2 → 0.7 / 0.9
        assert reading.memory_bound == pytest.approx(0.7 / 0.9)
        every_gpu = make_source("dcgm", model=StepTimeModel(), running_batch=lambda: 1,
                                dcgm_url=url).read()
        assert every_gpu.memory_bound == pytest.approx(1.4 / (1.4 + 1.4))  # means 1.4/3 each


@pytest.mark.parametrize("gpus, status", [({"0": (0.0, 0.0)}, 200), ({"0": (0.8, 0.1)}, 503)])
def test_dcgm_source_unknown_when_idle_or_exporter_fails(gpus, status):
    with FakeDcgmExporter(gpus, status=status) as url:
        assert DcgmUtilization(url).read() is None


def test_dcgm_source_unknown_when_exporter_is_down():
    with FakeDcgmExporter({"0": (0.8, 0.1)}) as url:
        pass
    assert DcgmUtilization(url, timeout_s=0.5).read() is None


def test_only_the_http_source_is_read_off_the_event_loop():
    # deployments/pools.py reads a non-blocking source inline: a stopping replica's executor is
    # shut down, and a to_thread there logged "Replica autoscaling stats failed" at every Ctrl-C
    assert EngineUtilization.blocking is False and DcgmUtilization.blocking is True
