"""Fixtures of the integration layer: the model lab (tests/session_app.py) and the real
kube-apiserver with a fresh namespace per test (tests/conftest_kube.py)."""

from tests.conftest_kube import kube_api, kube_ns  # noqa: F401
from tests.session_app import lab  # noqa: F401
