"""The test layers, by cost (STYLE.md, principle 6), one folder each:

- tests/unit: pure, fast tests: no model build, no Ray, no vLLM engine, no server, under a
  minute in all (`pytest tests/unit`);
- tests/integration: real parts: the model lab, vLLM engines, a local Ray, the kube-apiserver (and
  what is slow though pure: the autoscaling simulator's day, real-time waits for an absent head);
- tests/e2e: through a served application's HTTP, `ray job submit`, the CLI as a user runs it.

Each test gets its folder's marker (`unit`, `integration`, `e2e`). The fixtures that build models
or start Ray live in tests/session_app.py and are taken only by tests/integration/conftest.py and
tests/e2e/conftest.py; the API server's, in tests/conftest_kube.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.local_ray import SESSION_RAY

TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "integration", "e2e")  # the order a whole run takes them in: cheapest first


def pytest_configure(config):
    config.addinivalue_line("markers", "own_ray: the module starts (and stops) a local Ray of its "
                            "own (in this process or a subprocess); such modules run before any "
                            "test that takes the session's Ray")


def _layer(item) -> str | None:
    path = Path(item.path).resolve()
    if not path.is_relative_to(TESTS):  # e.g. doctests of the product's modules
        return None
    parts = path.relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else None


def pytest_collection_modifyitems(config, items):
    """Marks each test with its folder's layer and runs the layers cheapest first; within a
    layer, `own_ray` modules first: one process holds one Ray connection, so a module that starts
    its own local Ray must finish before the session's (`serve_instance`, tests/e2e) starts, which
    lives on until the session ends."""
    for item in items:
        if layer := _layer(item):
            item.add_marker(layer)
    items.sort(key=lambda item: (LAYERS.index(_layer(item)) if _layer(item) else len(LAYERS),
                                 0 if item.get_closest_marker("own_ray") else 1))


@pytest.fixture(scope="module", autouse=True)
def no_stray_ray():
    """Shuts down, after a module, a Ray this process connected to on the way that is not the
    session's: Ray Serve and Ray Serve LLM calls made outside a cluster (building the application
    in tests/integration/test_config_sweep_live.py) start a local Ray of their own, which the
    session's Ray fixture would then find connected."""
    yield
    import sys

    if "ray" in sys.modules and not SESSION_RAY["up"]:
        import ray

        if ray.is_initialized():
            ray.shutdown()
