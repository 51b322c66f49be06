"""Load generators: a closed loop at fixed concurrency and open-loop Poisson arrivals.

Closed loop (`closed_loop`): `concurrency` workers, each sending its next request when the previous
one ends; measures capacity at a batch size. Poisson (`poisson`): requests arrive with exponential
gaps at `rate_per_s` whatever the server does; measures latency and goodput at an offered load.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Iterator

import httpx

from bench.client import Sample, stream_request
from bench.workload import Job


async def closed_loop(client: httpx.AsyncClient, jobs: Iterator[Job], concurrency: int,
                      num_requests: int, prefix: str = "") -> tuple[list[Sample], float]:
    """Runs `num_requests` jobs through `concurrency` workers.

    Returns:
        (samples, wall seconds from the first send to the last answer).
    """
    todo = [next(jobs) for _ in range(num_requests)]
    todo.reverse()
    samples: list[Sample] = []

    async def worker() -> None:
        while todo:
            job = todo.pop()
            samples.append(await stream_request(client, prefix + job.path, job.body, job.task))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples, time.perf_counter() - t0


async def poisson(client: httpx.AsyncClient, jobs: Iterator[Job], rate_per_s: float,
                  num_requests: int, seed: int = 0, prefix: str = "") -> tuple[list[Sample], float]:
    """Sends `num_requests` jobs with exponential inter-arrival gaps of mean 1 / `rate_per_s`.

    Returns:
        (samples, wall seconds from the first send to the last answer).
    """
    rng = random.Random(seed)
    tasks = []
    t0 = time.perf_counter()
    for i in range(num_requests):
        job = next(jobs)
        tasks.append(asyncio.create_task(
            stream_request(client, prefix + job.path, job.body, job.task)))
        if i + 1 < num_requests:
            await asyncio.sleep(rng.expovariate(rate_per_s))
    samples = await asyncio.gather(*tasks)
    return list(samples), time.perf_counter() - t0
