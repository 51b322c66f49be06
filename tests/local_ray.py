"""A test module's own local Ray (see `own_ray` in tests/conftest.py)."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from deployments.cores import CORES_DIR_ENV

# True while the session's Ray is up (tests/session_app.py `serve_instance`).
SESSION_RAY = {"up": False}


def start_own_ray(num_cpus: int) -> None:
    """`ray.init` for an `own_ray` module, with a clear error where this process is already
    connected (a test that started Ray in-process and left it up). Its replicas lease cores from
    a folder of their own (deployments/cores.py), not against engines another cluster of this
    machine still winds down."""
    import ray

    if ray.is_initialized():
        pytest.fail("this process is already connected to a Ray cluster; a module that starts "
                    "its own must run before the session's Ray (mark it `own_ray`) and every "
                    "in-process Ray must be shut down")
    os.environ[CORES_DIR_ENV] = tempfile.mkdtemp(prefix="specserve-cores-")
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


def until(predicate, timeout_s: float, period_s: float = 2.0):
    """The first truthy `predicate()` within `timeout_s`, else None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(period_s)
    return None
