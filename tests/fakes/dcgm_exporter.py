"""A fake dcgm-exporter: a real HTTP server on 127.0.0.1 serving `/metrics` in the exporter's
Prometheus text format, with values the test sets (no GPU or DCGM on this machine).

Example:
    >>> with FakeDcgmExporter({"0": (0.8, 0.1)}) as url: ...
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HEADER = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
"""


def exporter_text(gpus: dict[str, tuple[float, float]]) -> str:
    """dcgm-exporter's text for {gpu index: (DRAM_ACTIVE, PIPE_TENSOR_ACTIVE)}, with the labels
    the real exporter writes and an NVML-style field that must be ignored."""
    lines = [_HEADER.rstrip("\n")]
    for field, i in (("DCGM_FI_PROF_DRAM_ACTIVE", 0), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1)):
        lines += [f"# HELP {field} profiling field.", f"# TYPE {field} gauge"]
        for gpu, values in gpus.items():
            lines.append(f'{field}{{gpu="{gpu}",UUID="GPU-{gpu}0000",device="nvidia{gpu}",'
                         f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"}} {values[i]}')
    for gpu in gpus:
        lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{gpu}0000"}} 100')
    return "\n".join(lines) + "\n"


class FakeDcgmExporter:
    """Serves `exporter_text(gpus)` at http://127.0.0.1:<port>/metrics while in a `with` block.

    Args:
        gpus: {gpu index: (DRAM_ACTIVE, PIPE_TENSOR_ACTIVE)}; assign `.gpus` to change them.
        status: HTTP status to answer with (e.g. 503 for a failing exporter).
    """

    def __init__(self, gpus: dict[str, tuple[float, float]], status: int = 200):
        self.gpus, self.status = gpus, status
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = exporter_text(fake.gpus).encode()
                self.send_response(fake.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/metrics"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
