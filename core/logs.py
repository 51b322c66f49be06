"""Sends the `specserve.*` loggers to Ray Serve's replica log.

Inside a replica, Ray Serve configures only the `ray.serve` logger (file per replica under
`/tmp/ray/session_*/logs/serve/`, plus stderr); other loggers propagate to a root logger without
handlers, and Python drops their INFO lines. Replicas call `use_serve_log_handlers()` once so the
router's decision lines and the pools' messages land next to Serve's own, with its request ids.
"""

from __future__ import annotations

import logging


def use_serve_log_handlers(level: int = logging.INFO) -> None:
    """Gives the `specserve` logger (and its children) the `ray.serve` logger's handlers."""
    serve_logger = logging.getLogger("ray.serve")
    ours = logging.getLogger("specserve")
    for handler in serve_logger.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.setLevel(level)
    ours.propagate = False
