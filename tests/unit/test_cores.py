"""Each CPU replica owns its cores, as a GPU replica owns its GPUs (deployments/cores.py).

Unit tests of the lease on lock files in a scratch folder; on the session application (the real
path), that no two replicas' engines share a core: tests/e2e/test_cores_live.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.cpu import cpu_auto_dtype, cpu_flags, cpu_model_name, served_dtype
from deployments.cores import CORES_DIR_ENV, CoreLease, NoFreeCores


@pytest.fixture
def cores_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(CORES_DIR_ENV, str(tmp_path))
    return tmp_path


def test_leases_are_exclusive_and_released(cores_dir):
    a = CoreLease.acquire(1, "a", allowed={0, 1})
    b = CoreLease.acquire(1, "b", allowed={0, 1})
    assert {a.cores[0], b.cores[0]} == {0, 1}
    with pytest.raises(NoFreeCores, match=r"needs 1 free core.*0 \(a pid \d+\).*1 \(b pid"):
        CoreLease.acquire(1, "c", allowed={0, 1})
    a.release()
    assert CoreLease.acquire(1, "c", allowed={0, 1}).cores == a.cores
    assert a.vllm_env() == {"VLLM_CPU_OMP_THREADS_BIND": str(a.cores[0]),
                            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def test_a_killed_holder_frees_its_cores(cores_dir):
    """The kernel drops a dead process's flock: a replacement finds the core free."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from deployments.cores import CoreLease; "
         "lease = CoreLease.acquire(2, 'holder', allowed={0, 1}); print('held', flush=True); "
         "time.sleep(600)"], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(NoFreeCores):
        CoreLease.acquire(1, "new", allowed={0, 1})
    holder.kill()
    holder.wait()
    assert CoreLease.acquire(2, "new", allowed={0, 1}).cores == [0, 1]


def test_dtype_auto_is_float32_on_a_cpu_without_native_bfloat16():
    # /proc/cpuinfo of this project's 2-core AMD EPYC (AVX2 only), shortened; and an AVX-512 one
    avx2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 fma\n"
    bf16 = avx2.replace("avx2 fma", "avx2 fma avx512f avx512_bf16")
    arm = "processor\t: 0\nFeatures\t: fp asimd sve bf16\n"
    assert cpu_flags(avx2) == {"fpu", "sse4_2", "avx", "avx2", "fma"}
    assert cpu_auto_dtype(cpu_flags(avx2)) == "float32"
    assert cpu_auto_dtype(cpu_flags(bf16)) == "auto"
    assert cpu_auto_dtype(cpu_flags(arm)) == "auto"
    assert cpu_flags("no flags here") == set()
    assert cpu_auto_dtype() in ("auto", "float32")  # this machine's own /proc/cpuinfo
    assert served_dtype("auto", "cpu") == cpu_auto_dtype()
    assert served_dtype("auto", "nvidia-h100") == "auto"
    assert served_dtype("bfloat16", "cpu") == "bfloat16"


def test_the_cpu_model_name_is_read_where_the_kernel_gives_one():
    x86 = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: avx2\nprocessor\t: 1\n" \
          "model name\t: AMD EPYC 9R14\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd\nCPU part\t: 0xd4f\n"
    assert cpu_model_name(x86) == "AMD EPYC 9R14"
    assert cpu_model_name(arm) == "0xd4f"
    assert cpu_model_name("nothing to read") == ""
