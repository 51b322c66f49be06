"""Benchmarks: scripts that print ratios measured side by side in one run (never timed tests).

Public modules: the `python -m bench.<name>` entry points the README, the Makefile and
router/classify.py name. The package imports none of them itself.
"""

__all__ = ["autoscale_sim", "classifier", "contention", "lossless", "run", "soak"]
