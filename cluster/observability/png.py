"""The dashboard's main panels as PNGs, drawn with matplotlib from any Prometheus's HTTP API, so a
reader sees them without Grafana:

    specserve observability png --prometheus http://127.0.0.1:9090 --out DIR [--minutes 30]

Each PNG is one panel of the catalog (panels.py, `main=True`): the same queries and legends,
evaluated with `query_range` over the last minutes (rate window: 4 steps, at least 60 s, which is
Grafana's `$__rate_interval` for its default 15 s scrape interval: four scrapes).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend)

from cluster.observability.panels import Panel, evaluable, panels  # noqa: E402

_LEGEND_FIELD = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_SCALE = {"percentunit": (100.0, "%"), "s": (1000.0, "ms"), "reqps": (1.0, "requests/s")}


def query_range(url: str, expr: str, start: float, end: float, step_s: float) -> list[dict]:
    """Prometheus `query_range`: [{"metric": {labels}, "values": [[t, "v"], ...]}, ...].

    Raises:
        RuntimeError: Prometheus refused the query (its error message included).
    """
    body = httpx.get(f"{url.rstrip('/')}/api/v1/query_range", timeout=60,
                     params={"query": expr, "start": start, "end": end, "step": step_s}).json()
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body.get('error')}")
    return body["data"]["result"]


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legend format with the series' label values (`{{pool}} p99` → `vanilla p99`)."""
    return _LEGEND_FIELD.sub(lambda m: labels.get(m.group(1), ""), fmt)


def _with_gaps(points: list[tuple[float, float]], step_s: float) -> list[tuple[float, float]]:
    """`points` with a NaN wherever samples are missing, so that a line breaks there instead of
    joining the two sides (Prometheus leaves out steps without a value)."""
    out: list[tuple[float, float]] = []
    for t, v in points:
        if out and t - out[-1][0] > 1.5 * step_s:
            out.append((out[-1][0] + step_s, math.nan))
        out.append((t, v if math.isfinite(v) else math.nan))
    return out


def render_panel(url: str, panel: Panel, out: Path, start: float, end: float,
                 step_s: float, window_s: float | None = None) -> int:
    """Draws one panel to `out`; returns how many series it drew. `window_s`: the rate window
    in seconds (default the larger of 60 s and 4 steps)."""
    window = f"{round(window_s or max(60, 4 * step_s))}s"
    scale, unit = _SCALE.get(panel.unit, (1.0, ""))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    drawn = 0
    for q in panel.queries:
        for series in query_range(url, evaluable(q.expr, window), start, end, step_s):
            points = _with_gaps([(float(t), float(v) * scale) for t, v in series["values"]],
                                step_s)
            if any(math.isfinite(y) for _, y in points):
                xs, ys = zip(*[((t - end) / 60, y) for t, y in points])
                ax.plot(xs, ys, drawstyle="steps-post" if panel.bars else "default",
                        label=legend(q.legend, series["metric"]), linewidth=1.5)
                drawn += 1
    ax.set_title(panel.title, fontsize=11)
    ax.set_xlabel("minutes before the end of the run")
    if unit:
        ax.set_ylabel(unit)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return drawn


def render(url: str, out_dir: Path, start: float, end: float, step_s: float | None = None,
           window_s: float | None = None) -> dict[str, int]:
    """Every main panel to `out_dir/<key>.png`; returns {key: series drawn}. `window_s`: as
    for `render_panel`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    step = step_s or max(5.0, (end - start) / 240)
    return {p.key: render_panel(url, p, out_dir / f"{p.key}.png", start, end, step, window_s)
            for p in panels() if p.main}


def main(argv: list[str] | None = None) -> int:
    """`specserve observability png`: renders the main panels from a Prometheus."""
    p = argparse.ArgumentParser(prog="specserve observability png", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prometheus", required=True, help="Prometheus base URL")
    p.add_argument("--out", required=True, type=Path, help="folder for the PNGs")
    p.add_argument("--minutes", type=float, default=30, help="time range ending now")
    args = p.parse_args(argv)
    end = time.time()
    drawn = render(args.prometheus, args.out, end - 60 * args.minutes, end)
    for key, n in drawn.items():
        print(f"{args.out / (key + '.png')}: {n} series")
    return 0 if all(drawn.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
