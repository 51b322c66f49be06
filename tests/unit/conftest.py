"""Fixtures of the unit layer: none that builds a model or starts Ray or a server; the KubeRay
CRDs' JSON Schemas are read from files (tests/conftest_kube.py)."""

from tests.conftest_kube import crd_schemas  # noqa: F401
