"""`python -m bench.busy_loop`: the engines' shared-memory busy-poll window, vLLM's 1 s against
specserve's CPU default, on the routed application `make serve` runs (bench.ab with `--setting
shm_busy_loop_s`).

    python -m bench.busy_loop [--windows 1.0 0.002] [--concurrency 1 2 4 8 16] [--repeats 3]
                              [--out DIR]

Why: vLLM's engine processes busy-poll their shared-memory queues for 1 s after every message
(deployments/vllm_plugin, part 2), so after each request an idle engine keeps its core busy for
a second. On a CPU node the serving frontend runs on the engines' cores. `PoolConfig.
shm_busy_loop_s` sets the window; this benchmark picked its CPU default by measurement. Cells,
rounds and the report are bench.ab's.
"""

from __future__ import annotations

from bench.ab import main as ab_main
from bench.ab import report, with_setting
from core import SpecserveConfig

__all__ = ["main", "report", "with_window"]


def with_window(base: SpecserveConfig, seconds: float, eager: bool) -> SpecserveConfig:
    """Routed 1+1 (the default speculator, autoscaling off) with both pools'
    `shm_busy_loop_s` = `seconds`."""
    return with_setting(base, "shm_busy_loop_s", seconds, eager)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (module docstring): bench.ab's, the setting fixed to `shm_busy_loop_s`."""
    return ab_main(argv, prog="bench.busy_loop", setting="shm_busy_loop_s", values=[1.0, 0.002])


if __name__ == "__main__":
    raise SystemExit(main())
