"""One batch run's rows through the pools: dispatch, retries, lines, and the stop at the first
failed write (the driver around it: cluster/batch/job.py).

Rows are taken in input order, at most `--max-in-flight` in flight; each is parsed and routed by
the online router's `RouteDecider` (`parse`, then `route` without admission), sent to its pool's
handle, retried while the pool is unavailable, and its line handed to the `RowWriter` (completion or input order). A row counts in
the stats once its line is written. The first failed write (or fsync) stops the run: nothing more
is taken or sent, rows in flight are cancelled, and what is on disk is whole lines only.

The decider prices the pools by throughput (`pricing="throughput"`, router/policy.py
`ThroughputSpeedup`, S = E[τ] · ΔR_s / ΔR_v): a batch job has no waiting user, so a row goes
speculative when it adds more tokens per second to the whole job there. The batch pressure a job
makes by design thus keeps the rows that gain most on the speculative path while that pool still
adds throughput, and spills the others to the vanilla pool. The driver joins the application's
StatsBoard as one more ingress (`RouteDecider.run`): the online router sees its rows in flight, and
the acceptance counts and the runtime pin (`PUT /admin/policy`) are shared both ways; the board
drops a driver's counts `STALE_AFTER_S` after it ends, as a stopped ingress replica's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json

from cluster.batch.output import OutputFailed, OutputFile
from cluster.batch.records import error_record, response_record
from cluster.batch.resume import ResumePlan
from cluster.batch.rows import BatchRow, Endpoint, RowError
from cluster.batch.summary import BatchStats, progress_line
from cluster.batch.writer import RowWriter
from core.ray_private import ErrorResponse, sanitize_chat_completion_request
from router.decider import RouteDecider, Routed
from router.errors import RequestError, error_response

RETRY_BACKOFF_S = 2.0
STATS_WAIT_S = 5.0  # for the first StatsBoard snapshot and router state before routing rows
_FAILURES_LOGGED = 5


def log(msg: str) -> None:
    print(f"specserve batch: {msg}", flush=True)


class BatchRun:
    """Runs the rows of one input file into one output file; stops at the first failed write.

    Args:
        args: the parsed flags.
        writer: where finished rows' lines go (completion or input order).
        decider: the route decisions, priced by throughput (`RouteDecider(..., generation=None,
            pricing="throughput")`: it follows the newest build's pin and never writes one).
        handles: streaming handle of each pool.
        stats: the run's counts (a row counts once its line is written).
        plan: what the output already holds (`plan_resume`).
        config_fp: this run's config fingerprint, recorded on each line.
    """

    def __init__(self, args: argparse.Namespace, writer: RowWriter, decider: RouteDecider,
                 handles: dict, stats: BatchStats, plan: ResumePlan, config_fp: str):
        self._args, self._writer, self._decider, self._handles = args, writer, decider, handles
        self._stats, self._plan, self._config_fp = stats, plan, config_fp
        self._failures_logged = 0
        self._main: asyncio.Task | None = None
        self._closing = False
        self.failure: OutputFailed | None = None

    async def run(self, rows, out: OutputFile) -> None:
        """All rows not yet in the output; returns when each has its line or gave up, or at the
        first failed write (`failure`), with every in-flight row cancelled."""
        self._main = asyncio.current_task()
        slots = asyncio.Semaphore(self._args.max_in_flight)
        tasks: set[asyncio.Task] = set()
        snapshot_seen, state_seen = asyncio.Event(), asyncio.Event()
        if self._decider.board is None:
            state_seen.set()
        background = [asyncio.create_task(self._decider.run(on_snapshot=snapshot_seen.set,
                                                            on_state=state_seen.set)),
                      asyncio.create_task(self._progress()),
                      asyncio.create_task(self._sync(out))]
        try:
            # Rows routed before the first StatsBoard snapshot (the pools' step-time profiles)
            # and router state (the runtime pin, shared acceptance) would see neither.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(snapshot_seen.wait(), state_seen.wait()),
                                       STATS_WAIT_S)
            for row in rows:
                if self.failure:
                    break
                if self._plan.has(row):
                    self._stats.skipped += 1
                    continue
                if isinstance(row, RowError):
                    seq = await self._writer.take()
                    self._put(seq, error_record(row, self._config_fp), self._stats.observe_error)
                    continue
                await slots.acquire()  # before `take`: a row is taken only when it can start
                if self.failure:
                    break
                seq = await self._writer.take()
                task = asyncio.create_task(self._row(seq, row))
                tasks.add(task)
                task.add_done_callback(lambda t: (tasks.discard(t), slots.release()))
            if tasks:
                await asyncio.wait(tasks)
        except asyncio.CancelledError:
            if self.failure is None:  # SIGTERM / Ctrl-C, not a failed write
                raise
            asyncio.current_task().uncancel()
        finally:
            self._closing = True
            for task in [*tasks, *background]:
                task.cancel()
            await asyncio.gather(*tasks, *background, return_exceptions=True)
            self._stats.unfinished = self._writer.taken - self._writer.written
            log(progress_line(self._stats, self._decider.pressure.local_in_flight_all()))

    def _stop(self, failure: OutputFailed) -> None:
        """The first failed write ends the run: nothing more is written or sent to a pool."""
        if self.failure is None:
            self.failure = failure
            log(f"stopping at the first failed write: {failure}")
        if self._main is not None and self._main is not asyncio.current_task() \
                and not self._closing:
            self._main.cancel()

    def _put(self, seq: int, record: dict, on_written) -> None:
        try:
            self._writer.put(seq, record, on_written)
        except OutputFailed as e:
            self._stop(e)

    def _drop(self, seq: int) -> None:
        try:
            self._writer.drop(seq)
        except OutputFailed as e:
            self._stop(e)

    async def _row(self, seq: int, row: BatchRow) -> None:
        try:
            answer = await self._route_and_run(row)
        except asyncio.CancelledError:
            self._drop(seq)
            raise
        except Exception as e:  # a bug must not lose the row silently: it stays for a re-run
            self._drop(seq)
            self._log_failure(row, "-", f"{type(e).__name__}: {e}")
            return
        if answer is None:
            self._drop(seq)
        else:
            self._put(seq, *answer)

    async def _route_and_run(self, row: BatchRow):
        """(record, what to count once it is written) of one row; None: no answer (left for a
        re-run)."""
        try:  # the ingress's checks and decision: the same 400s
            routed = await self._decider.route(self._decider.parse(row.body), admission=False)
        except RequestError as e:  # an invalid field, `route`, or no pool may take it
            return self._answer(row, e.status, _error_body(e.status, e.message, e.param))
        route, context = routed.decision.route, routed.features.context_tokens
        self._decider.pressure.start(route, 1, context)
        try:
            answer = await self._call(route, row)
        finally:
            self._decider.pressure.finish(route, 1, context)
        if answer is None:
            return None
        status, body = answer
        if route == "speculative" and status < 400:
            self._decider.learn(routed.features, body)
        return self._answer(row, status, body, routed)

    def _answer(self, row: BatchRow, status: int, body: dict, routed: Routed | None = None):
        headers = routed.headers if routed is not None else {}
        record = response_record(row, status, body, headers, self._config_fp)
        decision = routed.decision if routed is not None else None
        return record, functools.partial(
            self._stats.observe_response, status, body, decision and decision.route,
            decision and decision.reason, routed and routed.features.task)

    async def _call(self, route: str, row: BatchRow) -> tuple[int, dict] | None:
        """(status, body) from the pool, retrying an unavailable pool; None: gave up."""
        body = row.body
        if row.endpoint is Endpoint.CHAT:
            body = sanitize_chat_completion_request(body)
        for attempt in range(self._args.max_retries + 1):
            if attempt:
                await asyncio.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
            try:
                first = await asyncio.wait_for(self._first_chunk(route, row.endpoint, body),
                                               self._args.request_timeout_s)
            except Exception as e:  # replica died, backpressure, timeout: the pool, not the row
                self._log_failure(row, route, f"attempt {attempt + 1}: {type(e).__name__}: {e}")
                continue
            if not isinstance(first, ErrorResponse):
                return 200, first.model_dump()
            if first.error.code < 500:
                return first.error.code, {"error": first.error.model_dump()}
            self._log_failure(row, route, f"attempt {attempt + 1}: {first.error.code} "
                              f"{first.error.message}")
        return None

    def _log_failure(self, row: BatchRow, route: str, failure: str) -> None:
        """Logs the first few failures in full; the summary counts the rows left unfinished."""
        if self._failures_logged < _FAILURES_LOGGED:
            self._failures_logged += 1
            log(f"line {row.line} ({row.custom_id}) on {route}: {failure.splitlines()[0][:300]}")

    async def _first_chunk(self, route: str, endpoint: Endpoint, body):
        first = None
        async for chunk in getattr(self._handles[route], endpoint.value).remote(body, None):
            if first is None:
                first = chunk[0] if isinstance(chunk, list) else chunk
        return first

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(self._args.progress_interval_s)
            log(progress_line(self._stats, self._decider.pressure.local_in_flight_all()))

    async def _sync(self, out: OutputFile) -> None:
        """fsyncs each line within a second even when no further row finishes."""
        try:
            await out.sync_forever()
        except OutputFailed as e:
            self._stop(e)


def _error_body(status: int, message: str, param: str | None) -> dict:
    """OpenAI error JSON, as router/errors.py writes it online."""
    return json.loads(error_response(status, message, param).body)
