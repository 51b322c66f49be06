"""`python -m bench.host_noise`: how steady this machine is with specserve stopped.

    python -m bench.host_noise [--seconds 120] [--core 1] [--json FILE]

A served benchmark's spread is the machine's before it is specserve's. One thread (pinned to
`--core` when given) times, for `--seconds`, three loops one second each in turn: **compute** (a
256 x 256 float32 matmul, under 1 MiB with its result), **last-level cache** (a sum over an
array the size of the tiny target's weights, 27 MiB float32: what its engine reads every decode
step) and **DRAM** (a sum over 400 MiB). It prints each loop's rate per second as its median,
its [min-max] as multiples of the median and how many samples fell more than 10% below it
(`--json`: every sample). Where the host shares the last-level cache and memory bus with other
tenants, the two memory loops dip while compute holds, and the engines' speed (the tiny target's
working set is its 27 MiB of weights) moves with them.
Measured on the 2-core AMD EPYC virtual machine of 2026-12-06, idle, 90 s on core 1: compute
0.98-1.01x its median, 27 MiB sweep 0.81-1.04x, DRAM 0.94-1.03x (`host_noise.json` in
bench/results/2026-12-06-tiny-blocks-ab/; a first probe of 120 s there: 0.93-1.02x, 0.77-1.06x,
0.79-1.10x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

WEIGHTS_MIB = 27  # the tiny target's float32 weights (models/README: 6.8 M parameters)
DRAM_MIB = 400


def loops() -> dict:
    """The three timed loops, name -> a callable doing one unit of work. numpy is imported here,
    after `measure` pinned the process: its BLAS sizes its thread pool from the cores it may run
    on when first imported, and a pool started on every core would time the compute loop on
    all of them."""
    import numpy as np

    a = np.random.rand(256, 256).astype(np.float32)
    cache = np.random.rand(WEIGHTS_MIB * 2**20 // 4).astype(np.float32)
    dram = np.random.rand(DRAM_MIB * 2**20 // 4).astype(np.float32)
    return {"compute": lambda: a @ a, "llc_27MiB": cache.sum, "dram_400MiB": dram.sum}


def measure(seconds: float, core: int | None) -> dict[str, list[float]]:
    """Units per second of each loop, one one-second sample of each per turn (a turn takes
    about 3 s), turns until `seconds` have passed (the last may overrun by a turn).

    Raises:
        OSError: `core` is not one this process may run on.
    """
    if core is not None:
        os.sched_setaffinity(0, {core})
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # one thread: one core's rate, pinned or not
    work = loops()
    rates: dict[str, list[float]] = {name: [] for name in work}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for name, unit in work.items():
            t0, n = time.perf_counter(), 0
            while time.perf_counter() - t0 < 1.0:
                unit()
                n += 1
            rates[name].append(n / (time.perf_counter() - t0))
    return rates


def describe(rates: dict[str, list[float]]) -> list[str]:
    """One line per loop: median units/s, [min-max] as multiples of the median, and the
    samples more than 10% below it (their index = seconds since the start / loops)."""
    out = []
    for name, values in rates.items():
        m = statistics.median(values)
        low = [i for i, v in enumerate(values) if v < 0.9 * m]
        out.append(f"{name:12s} {len(values)} samples, median {m:9.1f}/s, "
                   f"[{min(values) / m:.2f}-{max(values) / m:.2f}]x the median; "
                   f"{len(low)} more than 10% below it")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.host_noise", description=__doc__.split(
        "\n\n")[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=120.0, help="how long in all (default 120)")
    p.add_argument("--core", type=int, default=None, help="pin to this core (default: any)")
    p.add_argument("--json", type=Path, help="write the per-second rates here")
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error(f"--seconds: must be positive, got {args.seconds}")
    if args.core is not None and args.core not in os.sched_getaffinity(0):
        p.error(f"--core: {args.core} is not one of this process's cores "
                f"{sorted(os.sched_getaffinity(0))}")
    rates = measure(args.seconds, args.core)
    print("\n".join(describe(rates)))
    if args.json:
        args.json.write_text(json.dumps(rates))


if __name__ == "__main__":
    main()
