"""Optional API keys: `Authorization: Bearer <key>` checked against the keys in an environment
variable (named by `server.api_keys_env`), in constant time, never logged.

The keys are read in the ingress replica's process on first use, so they never travel inside the
Serve application (its args hold only the variable's name) and never reach a manifest (KubeRay
sets the variable from a Secret).
"""

from __future__ import annotations

import hmac
import logging
import os

logger = logging.getLogger("specserve.router")

OPEN_PATHS = frozenset({"/health"})  # liveness probes carry no key


class ApiKeys:
    """The accepted keys.

    Args:
        keys: accepted keys; empty refuses every request (a variable set but empty fails closed).
    """

    def __init__(self, keys: list[str]):
        self._keys = [k.encode() for k in keys if k]

    @classmethod
    def from_env(cls, name: str) -> ApiKeys:
        """Keys from `$name`, comma-separated (surrounding blanks dropped).

        Raises:
            ValueError: the variable is unset or holds no key (names the variable, not its value).
        """
        keys = [k.strip() for k in os.environ.get(name, "").split(",") if k.strip()]
        if not keys:
            raise ValueError(f"server.api_keys_env: environment variable {name} is unset or empty "
                             "in the ingress replica; set it (comma-separated keys) or unset "
                             "api_keys_env")
        return cls(keys)

    def allows(self, authorization: str | None) -> bool:
        """True when `authorization` is `Bearer <an accepted key>`.

        Compares against every key with `hmac.compare_digest` (no early exit), so the time taken
        does not depend on how much of a key matched.
        """
        scheme, _, token = (authorization or "").partition(" ")
        given = token.strip().encode()
        ok = False
        for key in self._keys:
            ok |= hmac.compare_digest(given, key)
        return ok and scheme.lower() == "bearer"
