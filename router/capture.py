"""The router's half of capture: which requests the pools may record (deployments/capture.py).

A request is marked for capture when `capture.enabled` and its API key is not one of
`capture.excluded_api_keys_env`'s (checked in constant time, `router.auth.ApiKeys`); the mark and
the router's task type travel in the request's `vllm_xargs`, which vLLM hands the engine as
`SamplingParams.extra_args`. The router drops any `specserve_*` key a client sent, so only the
router marks requests.
"""

from __future__ import annotations

import logging

from core.capture_config import CAPTURE_KEY, TASK_KEY, XARGS_PREFIX, CaptureConfig
from router.auth import ApiKeys

logger = logging.getLogger("specserve.router")


class CaptureMarks:
    """Marks requests for capture.

    Args:
        cfg: the config's `capture:` block.

    An `excluded_api_keys_env` variable that is unset or empty in the router's process fails
    closed: nothing is captured, and the error is logged once.
    """

    def __init__(self, cfg: CaptureConfig):
        self._cfg = cfg
        self._excluded: ApiKeys | None = None
        self._closed = False
        if cfg.enabled and cfg.excluded_api_keys_env:
            try:
                self._excluded = ApiKeys.from_env(cfg.excluded_api_keys_env,
                                                  "capture.excluded_api_keys_env")
            except ValueError:
                logger.exception("capture off: its excluded keys are unavailable")
                self._closed = True

    def allows(self, authorization: str | None) -> bool:
        """True when a request sent with this `Authorization` header may be captured."""
        if not self._cfg.enabled or self._closed:
            return False
        return self._excluded is None or not self._excluded.allows(authorization)

    def mark(self, body, authorization: str | None, task: str) -> None:
        """Sets `body.vllm_xargs` (an OpenAI request of vLLM's protocol): the client's keys but
        `specserve_*`, plus the capture mark and `task` when `allows(authorization)`."""
        xargs = {k: v for k, v in (getattr(body, "vllm_xargs", None) or {}).items()
                 if not k.startswith(XARGS_PREFIX)}
        if self.allows(authorization):
            xargs.update({CAPTURE_KEY: 1, TASK_KEY: task})
        body.vllm_xargs = xargs or None
