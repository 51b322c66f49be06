"""`specserve serve` on a port something else holds: named before any Ray starts (cluster/ports.py)."""

from __future__ import annotations

import os
import socket

import yaml

from cluster import cli
from cluster.ports import port_holder, taken_ports
from core import DEFAULT_CONFIG_PATH, RAY_NODE_ENV, haproxy_ports_env


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_held_port_names_its_holder_and_a_free_one_is_none():
    with _listening() as s:
        port = s.getsockname()[1]
        holder = port_holder("127.0.0.1", port)
        assert holder and (f"(pid {os.getpid()})" in holder or holder == "another process")
        assert taken_ports({"server.port": ("127.0.0.1", port)}) == [
            f"server.port 127.0.0.1:{port} is held by {holder}"]
    assert port_holder("127.0.0.1", port) is None  # closed: free again
    assert taken_ports({"server.port": ("127.0.0.1", port)}) == []


def test_an_address_that_cannot_be_bound_is_named_with_the_os_reason():
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine: EADDRNOTAVAIL, not a holder
    assert taken_ports({"server.port": ("192.0.2.1", 8000)}) == [
        "server.port 192.0.2.1:8000 cannot be bound here: Cannot assign requested address"]


def test_serve_refuses_an_address_of_another_machine_naming_the_field(tmp_path, capsys,
                                                                    monkeypatch):
    for name in [*RAY_NODE_ENV, *haproxy_ports_env(0)]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["server"]["host"] = "192.0.2.1"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(data))
    assert cli.main(["serve", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "specserve: server.port 192.0.2.1:" in err and "cannot be bound here" in err
    assert "Set server.host and server.port in the config" in err
    import ray
    assert not ray.is_initialized()


def test_serve_refuses_a_held_port_before_starting_ray(tmp_path, capsys, monkeypatch):
    for name in [*RAY_NODE_ENV, *haproxy_ports_env(0)]:  # serve sets them: restored after
        monkeypatch.setenv(name, "")  # recorded, so restored (or removed) after the test
        monkeypatch.delenv(name)
    with _listening() as s:
        port = s.getsockname()[1]
        data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
        data["server"]["port"] = port
        cfg = tmp_path / "c.yaml"
        cfg.write_text(yaml.safe_dump(data))
        assert cli.main(["serve", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"specserve: server.port 127.0.0.1:{port} is held by" in err
    assert "set server.port in the config" in err
    import ray
    assert not ray.is_initialized()


def test_local_ports_include_haproxys_own_under_its_frontend(monkeypatch):
    monkeypatch.setenv("RAY_SERVE_ENABLE_HA_PROXY", "1")
    monkeypatch.setenv("RAY_SERVE_HAPROXY_STATS_PORT", "8404")
    monkeypatch.setenv("RAY_SERVE_HAPROXY_METRICS_PORT", "9101")
    assert cli.local_ports("127.0.0.1", 8000) == {
        "server.port": ("127.0.0.1", 8000), "RAY_SERVE_HAPROXY_STATS_PORT": ("0.0.0.0", 8404),
        "RAY_SERVE_HAPROXY_METRICS_PORT": ("0.0.0.0", 9101)}
    monkeypatch.setenv("RAY_SERVE_ENABLE_HA_PROXY", "0")
    assert list(cli.local_ports("127.0.0.1", 8000)) == ["server.port"]
