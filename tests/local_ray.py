"""A test module's own local Ray (see `own_ray` in tests/conftest.py)."""

from __future__ import annotations

import pytest


def start_own_ray(num_cpus: int) -> None:
    """`ray.init` for an `own_ray` module, with a clear error where this process is already
    connected (a test that started Ray in-process and left it up)."""
    import ray

    if ray.is_initialized():
        pytest.fail("this process is already connected to a Ray cluster; a module that starts "
                    "its own must run before the session's Ray (mark it `own_ray`) and every "
                    "in-process Ray must be shut down")
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
