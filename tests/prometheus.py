"""A real Prometheus for tests: its binaries, a local server scraping given targets, its API, and
the checks the live tests apply to the dashboard's queries.

Where the binaries come from (absent ones make the tests that need them skip, saying why):
$PROMETHEUS_BIN / $PROMTOOL_BIN, else ~/.cache/specserve/prometheus/ (unpacked from Debian's
`prometheus` package by `.ci/prometheus`, which `make test` runs), else `prometheus` / `promtool`
on PATH.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import yaml

from cluster.observability.panels import evaluable, panels

CACHE_DIR = Path("~/.cache/specserve/prometheus").expanduser()
# httpx logs a line per API call at INFO, which Ray's logging setup shows
logging.getLogger("httpx").setLevel(logging.WARNING)


def binary(name: str) -> Path | None:
    """`prometheus` or `promtool`: from its env var, the cache, or PATH; None when absent."""
    env = os.environ.get(f"{name.upper()}_BIN")
    candidates = [Path(env)] if env else []
    candidates.append(CACHE_DIR / name)
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def missing(name: str) -> str | None:
    """Why `name` cannot run here, or None."""
    if binary(name) is None:
        return (f"{name} not found: set ${name.upper()}_BIN, run `.ci/prometheus` (Debian's "
                f"prometheus package into {CACHE_DIR}) or install it on PATH")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PromQLError(RuntimeError):
    """Prometheus refused a query (parse or execution error)."""


class LocalPrometheus:
    """A Prometheus server on 127.0.0.1 scraping `targets` every `scrape_interval_s`.

    Args:
        targets: {job name: (host:port, metrics path)}.
        workdir: its config, rule files and TSDB go here.
        rule_files: Prometheus rule files to load (evaluated every `scrape_interval_s`).
        slow_jobs: {job name: its own scrape interval in s}, also its scrape timeout. Ray's
            metrics export refreshes every 10 s and answers with thousands of series: on a busy
            2-core CI machine one scrape can take over the 1 s default timeout, and a failed
            scrape leaves a gap in every series of that job (seen in CI: the TTFT panel's 30 s
            rate windows were empty while a 3 m window was not).
    """

    def __init__(self, targets: dict[str, tuple[str, str]], workdir: Path,
                 rule_files: list[Path] = (), scrape_interval_s: float = 1.0,
                 slow_jobs: dict[str, float] | None = None):
        self.workdir = Path(workdir)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        interval = f"{scrape_interval_s:g}s"
        slow = slow_jobs or {}
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval,
                       "scrape_timeout": interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": job, "metrics_path": path,
                                "static_configs": [{"targets": [address]}],
                                **({"scrape_interval": f"{slow[job]:g}s",
                                    "scrape_timeout": f"{slow[job]:g}s"} if job in slow else {})}
                               for job, (address, path) in targets.items()],
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self._proc: subprocess.Popen | None = None
        self._http = httpx.Client(base_url=self.url, timeout=30)

    def __enter__(self) -> LocalPrometheus:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, ready_within_s: float = 30.0) -> None:
        """Starts the server and waits until it answers ready."""
        log = open(self.workdir / "prometheus.log", "wb")
        self._proc = subprocess.Popen(
            [str(binary("prometheus")), f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_within_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self._proc.returncode}: "
                                   + (self.workdir / "prometheus.log").read_text()[-2000:])
            try:
                if self._http.get("/-/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {ready_within_s} s")

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 10 s)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._http.close()

    def _api(self, path: str, **params) -> dict | list:
        body = self._http.get(f"/api/v1/{path}", params=params).json()
        if body.get("status") != "success":
            raise PromQLError(f"{params.get('query', path)}: {body.get('errorType')}: "
                              f"{body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query's vector: [{"metric": {labels}, "value": [t, "v"]}, ...]."""
        params = {"query": expr} if at is None else {"query": expr, "time": at}
        data = self._api("query", **params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def targets(self) -> list[dict]:
        """Active scrape targets with their health and last error."""
        return self._api("targets")["activeTargets"]

    def rule_groups(self) -> list[dict]:
        """Loaded rule groups with each rule's health, last error and evaluation time."""
        return self._api("rules")["groups"]

    def metric_names(self) -> list[str]:
        """Every metric name in the TSDB (for failure messages)."""
        return self._api("label/__name__/values")


def why_not_sane(unit: str, result: list[dict]) -> str | None:
    """None if a query result has series, every value finite, ≥ 0, and ≤ 1 for a fraction."""
    if not result:
        return "no series"
    values = [float(r["value"][1]) for r in result]
    if not all(math.isfinite(v) for v in values):
        return f"non-finite values {values}"
    if any(v < 0 for v in values):
        return f"negative values {values}"
    if unit == "percentunit" and any(v > 1 for v in values):
        return f"fractions above 1: {values}"
    return None


def panel_queries(window: str, autoscaled: bool) -> dict[str, tuple[str, str]]:
    """{id: (PromQL, unit)} of the dashboard's panel queries whose `autoscaled` is as given."""
    return {f"{p.key}[{i}] {q.legend}": (evaluable(q.expr, window), p.unit)
            for p in panels() if p.autoscaled == autoscaled for i, q in enumerate(p.queries)}


def wait_sane(prom: LocalPrometheus, queries: dict[str, tuple[str, str]], within_s: float,
              ) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """Evaluates `queries` every 5 s until each is sane (`why_not_sane`) or `within_s` passed
    (Ray's export refreshes every 10 s). Returns (results, {id: why not sane})."""
    deadline = time.monotonic() + within_s
    while True:
        results = {k: prom.query(expr) for k, (expr, _) in queries.items()}
        bad = {k: why for k, (_, unit) in queries.items()
               if (why := why_not_sane(unit, results[k]))}
        if not bad or time.monotonic() > deadline:
            return results, bad
        time.sleep(5)
