"""A stand-in for a Ray actor handle over a local object: `handle.method.remote(*args)` runs the
method at once and returns a done future, so async code that awaits actor calls runs without Ray."""

from __future__ import annotations

import asyncio


class _Remote:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args):
        result = self._fn(*args)
        future = asyncio.get_running_loop().create_future()
        future.set_result(result)
        return future


class FakeBoardHandle:
    """An actor handle's `.method.remote(...)` over a local board."""

    def __init__(self, board):
        self.board = board

    def __getattr__(self, name):
        return _Remote(getattr(self.board, name))
