"""Capture inside a pool replica: the engine's finished requests → the capture store.

The router marks each request it allows to be captured (`vllm_xargs`, router/capture.py), which
vLLM passes to the engine as `SamplingParams.extra_args`; `install_capture` wraps the replica's
`AsyncLLM.generate` so that a marked request's outputs are collected as they pass (prompt token
ids after the chat template, output token ids per choice) and one row per choice is queued when
it finishes. The request path only appends to a list: a `CaptureRecorder` task writes the rows
from a thread (`CaptureStore.write`), so a slow, full or unwritable store drops rows, counted by
outcome, and never delays, fails or holds a request. Requests the router did not mark (the
startup profile, the sampling check, capture off) pass through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator

import numpy as np
from vllm.sampling_params import RequestOutputKind

from core.capture_config import CAPTURE_KEY, TASK_KEY, CaptureConfig
from core.capture_store import CaptureStore

logger = logging.getLogger("specserve.capture")

OUTCOMES = ("written", "dropped_full", "dropped_backlog", "dropped_error")


class CaptureRecorder:
    """Queues captured rows in memory and writes them in batches off the event loop.

    Args:
        cfg: the `capture:` block.
        pool: the pool this replica serves ("vanilla" or "speculative").
        store: where rows go (default: `CaptureStore(cfg)`); built lazily so that an unwritable
            URI costs rows, not the replica's start.

    Attributes:
        counts: rows by outcome (`OUTCOMES`), since the replica started.
        added_s: seconds capture added to each captured request's path (collecting its outputs
            and queueing its rows), the latest 2048 to 4096 requests.
    """

    def __init__(self, cfg: CaptureConfig, pool: str, store: CaptureStore | None = None):
        self._cfg = cfg
        self._pool = pool
        self._store = store
        self._rows: list[dict] = []
        self._wake = asyncio.Event()
        self.counts: Counter[str] = Counter({o: 0 for o in OUTCOMES})
        self.added_s: list[float] = []
        self._task: asyncio.Task | None = None

    def added_p99_s(self) -> float:
        """99th percentile of `added_s` (0.0 before any captured request)."""
        if not self.added_s:
            return 0.0
        ordered = sorted(self.added_s)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    def start(self) -> None:
        """Starts the writer task on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    def record(self, task: str, temperature: float, prompt_ids: list[int],
               outputs: dict[int, tuple[list[int], str | None]], spent_s: float = 0.0) -> None:
        """Queues one row per choice of a finished request; drops them (counted) when
        `max_buffered_rows` are already waiting. Never raises, never blocks.

        Args:
            spent_s: seconds the request already spent in capture's bookkeeping (collecting its
                outputs); with this call's own time it is one sample of `added_s`.
        """
        t0 = time.perf_counter()
        try:
            now = time.time()
            # int32 arrays now (~4 us each): the writer thread then joins them with numpy instead
            # of converting row by row while holding the GIL (core/capture_store.py `rows_table`)
            prompt = np.asarray(prompt_ids, dtype=np.int32)  # once, shared by the choices
            for ids, finish in outputs.values():
                if len(self._rows) >= self._cfg.max_buffered_rows:
                    self.counts["dropped_backlog"] += 1
                    continue
                self._rows.append({"time": now, "pool": self._pool, "task": task,
                                   "temperature": float(temperature),
                                   "prompt_token_ids": prompt,
                                   "output_token_ids": np.asarray(ids, dtype=np.int32),
                                   "finish_reason": finish})
            if len(self._rows) >= self._cfg.flush_rows:
                self._wake.set()
        except Exception:  # capture must never fail a request
            logger.exception("capture: a row could not be queued")
        finally:
            self.added_s.append(spent_s + time.perf_counter() - t0)
            if len(self.added_s) > 4096:
                del self.added_s[:2048]

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._cfg.flush_interval_s)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Writes every queued row now (from a thread); a store error drops them, counted."""
        rows, self._rows = self._rows, []
        if not rows:
            return
        try:
            if self._store is None:
                self._store = await asyncio.to_thread(CaptureStore, self._cfg)
            written, full = await asyncio.to_thread(self._store.write, rows)
            self.counts["written"] += written
            self.counts["dropped_full"] += full
        except Exception as e:
            self.counts["dropped_error"] += len(rows)
            logger.warning("capture: %d rows dropped, the store at %s failed: %s", len(rows),
                           self._cfg.uri, e)

    async def close(self) -> None:
        """Stops the writer task and writes what is queued."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()


def install_capture(engine_client, recorder: CaptureRecorder) -> None:
    """Wraps `engine_client.generate` (vLLM `AsyncLLM`) in place so that requests whose
    `sampling_params.extra_args[CAPTURE_KEY]` is set are recorded when they finish.

    Outputs pass through unchanged and at once. With `RequestOutputKind.DELTA` (streams) each
    output carries only its new tokens, which are accumulated; otherwise the last output has them
    all. A request that does not finish (client gone, engine error) is not recorded. Closing the
    wrapper closes vLLM's generator at once, so an abandoned request is aborted in the engine as
    without capture.
    """
    generate = engine_client.generate

    def capturing_generate(prompt, sampling_params, request_id, *args, **kwargs) -> AsyncGenerator:
        outputs = generate(prompt, sampling_params, request_id, *args, **kwargs)
        extra = getattr(sampling_params, "extra_args", None) or {}
        if not extra.get(CAPTURE_KEY):
            return outputs  # vLLM's own generator: nothing added on an unmarked request's path
        return _collect(outputs, sampling_params, str(extra.get(TASK_KEY, "")), recorder)

    engine_client.generate = capturing_generate


async def _collect(generator, sampling_params, task: str,
                   recorder: CaptureRecorder) -> AsyncGenerator:
    """Yields `generator`'s outputs while collecting their token ids; records them when the
    request finished; closes `generator` when closed itself (`install_capture`)."""
    delta = sampling_params.output_kind == RequestOutputKind.DELTA
    prompt_ids: list[int] | None = None
    choices: dict[int, tuple[list[int], str | None]] = {}
    finished, spent = False, 0.0
    async with contextlib.aclosing(generator) as outputs:
        async for out in outputs:
            t0 = time.perf_counter()
            if prompt_ids is None and out.prompt_token_ids is not None:
                prompt_ids = list(out.prompt_token_ids)
            for c in out.outputs:
                if delta and c.index in choices:
                    choices[c.index][0].extend(c.token_ids)
                    choices[c.index] = (choices[c.index][0], c.finish_reason)
                else:
                    choices[c.index] = (list(c.token_ids), c.finish_reason)
            finished = out.finished
            spent += time.perf_counter() - t0
            yield out
    if finished and prompt_ids is not None:
        recorder.record(task, sampling_params.temperature, prompt_ids, choices, spent)
