"""Fixtures of the end-to-end layer: the model lab and the session's Serve application on a
local Ray, shared by every HTTP test (tests/session_app.py)."""

from tests.session_app import client, lab, serve_config, serve_instance, server  # noqa: F401
