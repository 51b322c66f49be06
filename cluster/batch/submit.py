"""`specserve batch --submit URL ...`: submits the batch as a Ray job and follows it, waiting
while the head is not up yet.

`ray job submit` fails at once when the head's dashboard does not answer (a head still starting).
This submitter retries every `RETRY_PERIOD_S` for up to `--wait-s`, saying what it waits for, then
submits `python -m cluster.cli batch <the same flags>` with the repository as working dir, tails
the job's log and exits 0 only if the job succeeded (the job's own exit status: 1 when rows are left
for a re-run).

Paths: `--output` is made absolute (the driver must not write into its temporary working dir);
`--input` and `--config` are made relative to the repository when inside it (they travel with the
working dir), else absolute (the head must see the same filesystem, as a local head does).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from pathlib import Path

from ray.exceptions import AuthenticationError
from ray.job_submission import JobStatus, JobSubmissionClient

from cluster.batch.app import RETRY_PERIOD_S
from cluster.batch.run import log

REPO_ROOT = Path(__file__).resolve().parents[2]


def job_argv(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """The driver's flags: `argv` without --submit/--no-follow, paths rewritten for the head."""
    out, skip = [], False
    paths = {"--input": _travelling, "--config": _travelling,
             "--output": lambda p: str(Path(p).resolve())}
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name, eq, value = arg.partition("=")
        if name in ("--submit", "--no-follow"):
            skip = name == "--submit" and not eq
            continue
        if name in paths:
            value = value if eq else argv[i + 1]
            out += [name, paths[name](value)]
            skip = not eq
            continue
        out.append(arg)
    return out


def _travelling(path: str) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else str(p)


def _job_client(address: str, wait_s: float) -> JobSubmissionClient | None:
    """A job client for the head's dashboard, retrying while it does not answer."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return JobSubmissionClient(address)
        except AuthenticationError as e:
            log(f"{address} refused the request: {str(e).splitlines()[0]} (a head with token "
                "authentication needs RAY_AUTH_MODE=token and its token, e.g. ~/.ray/auth_token)")
            return None
        except (ConnectionError, RuntimeError) as e:
            if time.monotonic() >= deadline:
                log(f"the Ray head at {address} did not answer within {wait_s:.0f} s (--wait-s): "
                    f"{str(e).splitlines()[0]}")
                return None
            log(f"the Ray head at {address} is not up yet ({type(e).__name__}); retrying every "
                f"{RETRY_PERIOD_S:.0f} s for up to {wait_s:.0f} s (--wait-s)")
            time.sleep(RETRY_PERIOD_S)


def submit(args: argparse.Namespace, argv: list[str]) -> int:
    """Submits the batch job, follows its log unless --no-follow; the job's verdict as status."""
    client = _job_client(args.submit, args.wait_s)
    if client is None:
        return 1
    entrypoint = "python -m cluster.cli batch " + shlex.join(job_argv(args, argv))
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env={"working_dir": str(REPO_ROOT)})
    log(f"submitted job {job_id}: {entrypoint}")
    if args.no_follow:
        log(f"follow it with: ray job logs --address {args.submit} -f {job_id}")
        return 0

    async def tail() -> None:
        async for lines in client.tail_job_logs(job_id):
            print(lines, end="", flush=True)

    asyncio.run(tail())
    status = client.get_job_status(job_id)
    log(f"job {job_id} {status.value}")
    return 0 if status == JobStatus.SUCCEEDED else 1
