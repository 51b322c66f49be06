"""Whether a local `specserve serve` can have the ports it is about to listen on.

Under Ray Serve's HAProxy frontend (opt-in, `core.RAY_NODE_ENV`) HAProxy is started by
Serve in the background, and an haproxy left by a Ray that was killed (SIGKILL) keeps its ports:
the likeliest cause of the CI failures that made the frontend opt-in on 2026-12-04 (README,
"Serve's frontend"). This check names the holder before any Ray starts, instead of leaving the
failure to surface later from inside Serve.
"""

from __future__ import annotations

import errno
import socket

import psutil


def port_holder(host: str, port: int) -> str | None:
    """None when `host:port` (TCP) can be bound now; else who holds it: "name (pid N)" when the
    kernel tells (psutil: needs the right to read the other process), "another process" if not.

    Raises OSError when the address cannot be bound for another reason than a holder (not an
    address of this machine: EADDRNOTAVAIL; a port below 1024 without the right: EACCES).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no holder
        try:
            s.bind((host, port))
            return None
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port \
                    and conn.laddr.ip in (host, "0.0.0.0", "::") and conn.pid:
                return f"{psutil.Process(conn.pid).name()} (pid {conn.pid})"
    except (psutil.Error, OSError):
        pass
    return "another process"


def taken_ports(ports: dict[str, tuple[str, int]]) -> list[str]:
    """One line per port of `ports` ({what: (host, port)}) that cannot be listened on: "WHAT
    HOST:PORT is held by HOLDER", or "WHAT HOST:PORT cannot be bound here: REASON" (the OS's
    words) when no process holds it but the bind fails all the same."""
    out = []
    for what, (host, port) in ports.items():
        try:
            holder = port_holder(host, port)
        except OSError as e:
            out.append(f"{what} {host}:{port} cannot be bound here: {e.strerror or e}")
            continue
        if holder:
            out.append(f"{what} {host}:{port} is held by {holder}")
    return out
