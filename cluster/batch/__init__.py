"""`specserve batch`: offline generation over an OpenAI Batch API file, on a Ray cluster.

The driver (job.py) reads rows (rows.py), skips those the output already answers (resume.py),
routes each through the online router's `RouteDecider` in throughput mode to a pool of the
specserve application (app.py), runs them with retries (run.py), writes each answer as one line
(records.py) to the output file (writer.py, output.py) and reports (summary.py); `--submit` sends
it as a Ray job (submit.py).
"""

from cluster.batch.job import add_arguments, main, run
from cluster.batch.run import log

__all__ = ["add_arguments", "log", "main", "run"]
