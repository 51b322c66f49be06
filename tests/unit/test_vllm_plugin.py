"""specserve's vLLM plugin, part 2 (deployments/vllm_plugin): the shared-memory queues' busy-poll
window, from `SPECSERVE_SHM_BUSY_LOOP_S` to vLLM's `SpinCondition` readers; part 3, int8 layers
kept off the AMX kernel where it cannot run them."""

import pytest
import zmq
from vllm.distributed.device_communicators import shm_broadcast
from vllm.utils.network_utils import get_open_zmq_ipc_path

import specserve_vllm_plugin as plugin
from core.pool_config import SHM_BUSY_LOOP_ENV


def test_the_variable_is_the_one_the_pools_set():
    assert plugin.BUSY_LOOP_ENV == SHM_BUSY_LOOP_ENV


@pytest.mark.parametrize("raw, want", [(None, None), ("", None), ("0", 0.0), ("0.002", 0.002),
                                       ("1", 1.0)])
def test_the_window_is_read_from_the_environment(raw, want):
    env = {} if raw is None else {SHM_BUSY_LOOP_ENV: raw}
    assert plugin.busy_loop_from_env(env) == want


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "2ms"])
def test_a_bad_window_names_the_variable(raw):
    with pytest.raises(ValueError, match=f"{SHM_BUSY_LOOP_ENV}: expected seconds >= 0, got"):
        plugin.busy_loop_from_env({SHM_BUSY_LOOP_ENV: raw})


@pytest.fixture
def reader(monkeypatch):
    """A real `SpinCondition` reader (and its writer) just after a read, its zmq poller's `poll`
    recording each call (`reader.polls`: the reader slept on its socket instead of spinning);
    vLLM's `wait` and the window are restored afterwards."""
    spin_cls = shm_broadcast.SpinCondition
    monkeypatch.setattr(spin_cls, "wait", spin_cls.wait)
    monkeypatch.setattr(spin_cls, "specserve_busy_loop_s", None, raising=False)
    ctx = zmq.Context()
    address = get_open_zmq_ipc_path()
    writer = spin_cls(is_reader=False, context=ctx, notify_address=address)
    spin = spin_cls(is_reader=True, context=ctx, notify_address=address)
    spin.polls = []
    poll = spin.poller.poll
    monkeypatch.setattr(spin.poller, "poll",
                        lambda timeout=None: spin.polls.append(timeout) or poll(timeout))
    spin.record_read()
    yield spin
    for s in (spin.local_notify_socket, spin.read_cancel_socket, spin.write_cancel_socket,
              writer.local_notify_socket):
        s.close(linger=0)
    ctx.term()


def test_vllm_spins_a_second_after_a_read(reader):
    reader.wait(timeout_ms=5)
    assert reader.polls == []  # the sched_yield branch: vLLM's 1 s window


def test_a_bounded_window_sleeps_on_the_socket_after_it(reader):
    assert plugin.bound_shm_busy_loop(0.0)  # a reader made before the plugin ran is bounded too
    reader.wait(timeout_ms=5)
    assert reader.polls == [5]
    reader.wait(timeout_ms=None)  # vLLM passes its 5 s recheck or None: parked 10 ms at most
    reader.wait(timeout_ms=5000)
    assert reader.polls == [5, plugin.PARK_MS, plugin.PARK_MS]
    reader.polls.clear()
    assert not plugin.bound_shm_busy_loop(0.0)  # idempotent
    assert plugin.bound_shm_busy_loop(60.0)  # a later call changes the window
    reader.wait(timeout_ms=5)
    assert reader.polls == []  # within 60 s of the last read: it spins


def test_register_applies_the_window_the_pool_set(reader, monkeypatch):
    from vllm.model_executor.kernels.linear.scaled_mm import cpu as scaled_mm_cpu
    from vllm.model_executor.layers import utils as layer_utils

    for module in (scaled_mm_cpu, layer_utils):  # register's part 3, undone afterwards
        monkeypatch.setattr(module, "check_cpu_sgl_kernel", module.check_cpu_sgl_kernel)
    monkeypatch.setenv(SHM_BUSY_LOOP_ENV, "0")
    plugin.register()
    reader.wait(timeout_ms=5)
    assert reader.polls == [5]
    monkeypatch.setenv(SHM_BUSY_LOOP_ENV, "-1")
    with pytest.raises(ValueError, match=SHM_BUSY_LOOP_ENV):
        plugin.register()


def test_the_tightened_check_keeps_int8_weights_the_packer_refuses_off_the_amx_kernel():
    import torch

    calls = []

    def stock(n, k, dtype):
        calls.append((n, k, dtype))
        return True

    check = plugin.packable_check(stock)
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.bfloat16)  # as while vLLM loads a bfloat16 model
        assert not check(688, 128, torch.int8)  # the INT8 draft's merged gate/up projection
        assert check(704, 128, torch.int8) and check(688, 128, torch.bfloat16)
        torch.set_default_dtype(torch.float32)  # a float32 model: no AMX int8 kernel
        assert not check(704, 128, torch.int8)
    finally:
        torch.set_default_dtype(previous)
    assert calls == [(704, 128, torch.int8), (688, 128, torch.bfloat16)]


def test_every_int8_shape_sent_to_the_amx_kernel_packs(monkeypatch):
    """On a CPU with AMX the plugin's check admits exactly the int8 shapes
    `convert_weight_packed` packs (N % 32 == 0 here); without AMX no int8 weight goes there."""
    import torch
    import vllm._custom_ops  # noqa: F401
    from vllm.model_executor.kernels.linear.scaled_mm import cpu as scaled_mm_cpu
    from vllm.model_executor.layers import utils as layer_utils

    for module in (scaled_mm_cpu, layer_utils):
        monkeypatch.setattr(module, "check_cpu_sgl_kernel", module.check_cpu_sgl_kernel)
    amx = torch.cpu._is_amx_tile_supported()
    assert plugin.fix_int8_amx_dispatch() == amx
    check = scaled_mm_cpu.check_cpu_sgl_kernel
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # as while vLLM loads a bfloat16 model
    try:
        admitted = {n for n in range(16, 769, 16) if check(n, 128, torch.int8)}
    finally:
        torch.set_default_dtype(previous)
    assert admitted == ({n for n in range(32, 769, 32)} if amx else set())
    for n in admitted:
        torch.ops._C.convert_weight_packed(torch.zeros(n, 128, dtype=torch.int8))
