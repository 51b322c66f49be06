"""`specserve batch`: offline generation over an OpenAI Batch API file, on a Ray cluster.

    ray job submit --working-dir . -- \
        python -m cluster.cli batch --input in.jsonl --output /abs/out.jsonl
    python -m cluster.cli batch --input in.jsonl --output out.jsonl   # directly, local Ray
    python -m cluster.cli batch --submit http://127.0.0.1:8265 ...    # submits, waits for the head

Rows (cluster/batch/run.py) are checked as the ingress checks requests and go to the pools of the
specserve application (cluster/batch/app.py) through the online router's `RouteDecider` in
throughput mode, at most `--max-in-flight` at a time; each answer is appended to the
output as one complete line (cluster/batch/output.py), as rows finish or in input order
(`--ordered`, cluster/batch/writer.py). Re-running with the same output skips the rows it already
answers, so a killed job re-submitted finishes every row exactly once; an output holding answers to
another input or config is refused (cluster/batch/resume.py). Rows that got no answer (engine
unavailable after retries) get no line: the run exits 1 and a re-run retries them. The first failed
write (disk full) stops the run: nothing more goes to the pools, and what is on disk stays whole.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import ray

from cluster.batch.app import (ClusterUnavailable, close_app, connect_ray, in_ray_job, open_app,
                               settle_handles)
from cluster.batch.output import OutputBusy, OutputFailed, OutputFile
from cluster.batch.resume import config_fingerprint, plan_resume
from cluster.batch.rows import count_lines, read_rows
from cluster.batch.run import BatchRun, log
from cluster.batch.submit import submit
from cluster.batch.summary import BatchStats, summary_text
from cluster.batch.writer import RowWriter
from core import DEFAULT_CONFIG_PATH, load_config
from router.board import get_board
from router.decider import RouteDecider

CONFIG_JSON_ENV = "SPECSERVE_CONFIG_JSON"  # how the RayJob manifest passes the config
ORDER_WINDOW_PER_SLOT = 4  # --ordered: rows taken and not yet written, per --max-in-flight slot


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", required=True, help="OpenAI Batch API JSONL (on the head's "
                   "filesystem; a relative path under `ray job submit` is inside --working-dir)")
    p.add_argument("--output", required=True, help="results JSONL, appended; re-running with the "
                   "same file skips the rows it answers, and refuses if it holds answers to "
                   "another input or config (absolute under `ray job submit`)")
    p.add_argument("--replace-changed", action="store_true", help="re-run rows whose answer in "
                   "--output no longer matches their input line or the config (and drop answers "
                   "to custom_ids not in --input), replacing their old lines")
    p.add_argument("--ordered", action="store_true", help="write lines in input order (each "
                   "once every earlier row of the run has its line) instead of as rows finish")
    p.add_argument("--config", default=None, help=f"YAML config (default: ${CONFIG_JSON_ENV} if "
                   f"set, else {DEFAULT_CONFIG_PATH.name})")
    p.add_argument("--app", default="specserve", help="Serve application to use if running; "
                   "else `<app>-batch` is deployed for the job")
    p.add_argument("--keep-app", action="store_true", help="leave an application the job "
                   "deployed running afterwards")
    p.add_argument("--address", default=None, help="Ray address (default: the job's cluster, "
                   "$RAY_ADDRESS, else a new local Ray)")
    p.add_argument("--max-in-flight", type=_positive_int, default=64,
                   help="rows in flight at once")
    p.add_argument("--max-retries", type=int, default=3, help="retries of a row whose pool is "
                   "unavailable (5xx, replica died) before it is left for a re-run")
    p.add_argument("--request-timeout-s", type=float, default=600.0, help="per attempt")
    p.add_argument("--wait-s", type=float, default=600.0, help="how long to wait for the Ray "
                   "head and the application to come up")
    p.add_argument("--progress-interval-s", type=float, default=10.0, help="progress line period")
    p.add_argument("--summary", default=None, help="also write the summary JSON to this file")
    p.add_argument("--submit", default=None, metavar="URL", help="submit this command as a Ray "
                   "job to the head's dashboard URL (waits while the head is not up) and follow it")
    p.add_argument("--no-follow", action="store_true", help="with --submit: do not tail the job")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    """The driver.

    Returns:
        The exit status: 0 when every row has its line; 1 when some are left for a re-run (no
        answer, interrupted, a failed write, the cluster unavailable, the output busy); 2 when
        nothing ran: a bad path, an output that cannot be written, or one holding answers to
        another input or config (cluster/batch/resume.py).
    """
    cfg = load_config(args.config, env_var=CONFIG_JSON_ENV)
    output = Path(args.output)
    if in_ray_job() and not output.is_absolute():
        log(f"--output {args.output}: a relative path under `ray job submit` lands in the job's "
            "temporary working dir and is lost; give an absolute path on the head")
        return 2
    if not Path(args.input).is_file():
        log(f"--input {args.input}: no such file")
        return 2
    try:
        out = OutputFile(output)
    except OutputBusy as e:
        log(str(e))
        return 1
    except OutputFailed as e:
        log(f"--output {args.output}: {e}; nothing was run")
        return 2
    existing = out.existing
    config_fp = config_fingerprint(cfg)
    plan = plan_resume(existing.records, read_rows(args.input, cfg.model.served_model_name),
                       config_fp, args.replace_changed)
    log(f"input {Path(args.input).resolve()}, output {output.resolve()}: {existing.rows} rows "
        "already there" + (f", torn last line ({existing.truncated_bytes} bytes) removed"
                           if existing.truncated_bytes else "")
        + (f", {existing.unreadable} unreadable lines ignored" if existing.unreadable else ""))
    if plan.changed and not args.replace_changed:
        out.close()
        log(plan.refusal(args.input, args.output))
        return 2
    if plan.remove:
        try:
            out.remove_lines(plan.remove)
        except OutputFailed as e:
            out.close()
            log(f"--output {args.output}: {e}; nothing was run")
            return 1
        log(f"removed {plan.superseded} lines without an answer that no longer match their "
            f"input line, and {len(plan.remove) - plan.superseded} changed answers "
            "(--replace-changed): those rows run again")
    stats = BatchStats(total=count_lines(args.input))
    writer = RowWriter(out, args.ordered, ORDER_WINDOW_PER_SLOT * args.max_in_flight)
    app, owned, failure, handles = None, False, None, {}
    try:
        connect_ray(args.address, cfg, args.wait_s, log)
        app, handles, owned = open_app(cfg, args.app, args.wait_s, log)
        driver_id = f"batch-{os.getpid()}-{int(time.time())}"
        decider = RouteDecider(cfg, sorted(handles), generation=None, board=get_board(app),
                               replica_id=driver_id, pricing="throughput")
        stats.started_s = time.monotonic()
        batch = BatchRun(args, writer, decider, handles, stats, plan, config_fp)
        _run_until_signal(batch.run(read_rows(args.input, cfg.model.served_model_name), out))
        failure = batch.failure
    except ClusterUnavailable as e:
        log(str(e))
        return 1
    finally:
        try:
            out.close()
        except OutputFailed as e:
            failure = failure or e
            log(f"--output {args.output}: {e}")
        if handles:
            settle_handles(handles)
        if owned and not args.keep_app:
            close_app(app, log)
        if ray.is_initialized():
            ray.shutdown()
    summary = stats.to_dict()
    print(summary_text(summary), flush=True)
    if args.summary:
        try:
            Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
        except OSError as e:
            log(f"--summary {args.summary}: not written ({e})")
    if failure is not None:
        log(f"--output {args.output}: {failure}. Stopped at the first failed write: {stats.done} "
            f"of {stats.total} rows have their line, each complete; free space (or fix the "
            "output) and re-run the same command to finish the rest")
        return 1
    if stats.unfinished or stats.done < stats.total:
        log(f"{stats.total - stats.done} rows have no line yet; re-run the same command to "
            "finish them")
        return 1
    return 0


def _run_until_signal(coro) -> None:
    """Runs the batch; SIGTERM (`ray job stop`) stops it like Ctrl-C, rows written so far kept."""
    async def main() -> None:
        task = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await coro

    try:
        asyncio.run(main())
    except (asyncio.CancelledError, KeyboardInterrupt):
        log("interrupted: rows written so far are kept; re-run to finish")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="specserve batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.submit:
        return submit(args, sys.argv[1:] if argv is None else argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
