"""Optional API keys: `Authorization: Bearer <key>` checked against the keys in an environment
variable (named by `server.api_keys_env`), in constant time, never logged; a separate admin key set
(`server.admin_api_keys_env`) for `/admin/*`.

The keys are read in the ingress replica's process on first use, so they never travel inside the
Serve application (its args hold only the variables' names) and never reach a manifest (KubeRay
sets the variables from a Secret).
"""

from __future__ import annotations

import hmac
import logging
import os

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from router.errors import error_response

logger = logging.getLogger("specserve.router")

OPEN_PATHS = frozenset({"/health"})  # liveness probes carry no key
ADMIN_PREFIX = "/admin"


class ApiKeys:
    """The accepted keys.

    Args:
        keys: accepted keys; empty refuses every request (a variable set but empty fails closed).
    """

    def __init__(self, keys: list[str]):
        self._keys = [k.encode() for k in keys if k]

    @classmethod
    def from_env(cls, name: str, field: str = "server.api_keys_env") -> ApiKeys:
        """Keys from `$name`, comma-separated (surrounding blanks dropped).

        Args:
            field: the config field that named the variable, for the error message.

        Raises:
            ValueError: the variable is unset or holds no key (names the variable, not its value).
        """
        keys = [k.strip() for k in os.environ.get(name, "").split(",") if k.strip()]
        if not keys:
            raise ValueError(f"{field}: environment variable {name} is unset or empty in the "
                             f"ingress replica; set it (comma-separated keys) or unset {field}")
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


def access(path: str, authorization: str | None, keys: ApiKeys | None,
           admin_keys: ApiKeys | None) -> int:
    """HTTP status the key check gives a request: 200 (pass), 401 (no accepted key) or 403 (an
    inference key on `/admin/*` while admin keys are set).

    Args:
        path: the path relative to the application's route prefix.
        authorization: the `Authorization` header, if any.
        keys: the inference keys (None: inference endpoints are open).
        admin_keys: the admin keys (None: `/admin/*` takes the inference keys).
    """
    if path in OPEN_PATHS:
        return 200
    admin_path = path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")
    if admin_keys is not None and admin_keys.allows(authorization):
        return 200  # an admin key opens every endpoint
    inference_ok = keys is None or keys.allows(authorization)
    if admin_path and admin_keys is not None:
        return 403 if keys is not None and keys.allows(authorization) else 401
    return 200 if inference_ok else 401


class ApiKeyGuard:
    """ASGI middleware: refuses a request without an accepted key (`access`) in OpenAI error JSON,
    401 with `WWW-Authenticate: Bearer`, or 403.

    Paths are matched relative to the application's route prefix (ASGI `root_path`), so an
    application served under `/x` keeps `/x/health` open and `/x/admin/*` admin-only.

    Args:
        app: the ASGI application behind it.
        api_keys_env: variable holding the inference keys (None: no inference keys).
        admin_api_keys_env: variable holding the admin keys (None: no admin keys).
    """

    def __init__(self, app: ASGIApp, api_keys_env: str | None, admin_api_keys_env: str | None):
        self.app = app
        self._envs = {"server.api_keys_env": api_keys_env,
                      "server.admin_api_keys_env": admin_api_keys_env}
        self._keys: dict[str, ApiKeys | None] = {}  # by field, read on the first request

    def _load(self, field: str) -> ApiKeys | None:
        if field not in self._keys:
            name = self._envs[field]
            try:
                self._keys[field] = None if name is None else ApiKeys.from_env(name, field)
            except ValueError:
                logger.exception("API keys unavailable: refusing every request they guard")
                self._keys[field] = ApiKeys([])
        return self._keys[field]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not any(self._envs.values()):
            return await self.app(scope, receive, send)
        status = access(route_path(scope), Headers(scope=scope).get("authorization"),
                        self._load("server.api_keys_env"), self._load("server.admin_api_keys_env"))
        if status == 200:
            return await self.app(scope, receive, send)
        if status == 403:
            response = error_response(403, "/admin/* needs an admin key; this key serves "
                                      "inference only")
        else:
            response = error_response(401, "Missing or invalid API key: send "
                                      "`Authorization: Bearer <key>`",
                                      headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


def route_path(scope: Scope) -> str:
    """The request's path below the application's route prefix (`root_path`), as Starlette
    routes it."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root):] or "/"
    return path
