"""Long whole cells (this folder's long/, 51-82 s per system) against the short whole cells of
bench/results/2026-12-06-tiny-blocks-ab/b1-* (8-18 s per system), the same default config.

    python summary.py

For each cell both runs share: each system's output tok/s and two same-app ratios (routed /
better forced pool, forced-speculative / forced-vanilla), one value per round, as median
[min-max] and the half-range in % of the median; and the seconds each system ran a cell.
"""
import json
import statistics
from pathlib import Path

here = Path(__file__).parent
short_dir = here.parent / "2026-12-06-tiny-blocks-ab"


def rounds(paths):
    out = {}
    for run in paths:
        for cell, row in json.loads(run.read_text())["cells"].items():
            n = min(len(v) for v in row.values())
            for i in range(n):
                out.setdefault(cell, []).append({s: runs[i] for s, runs in row.items()})
    return out


def fmt(v):
    m = statistics.median(v)
    return f"{m:.2f} [{min(v):.2f}-{max(v):.2f}] ±{max(max(v) - m, m - min(v)) / m:.0%}"


def fmt_tok(v):
    m = statistics.median(v)
    return f"{m:.0f} [{min(v):.0f}-{max(v):.0f}] ±{max(max(v) - m, m - min(v)) / m:.0%}"


sides = {"short (8-18 s)": rounds(sorted(short_dir.glob("b1-*/results.json"))),
         "long (51-82 s)": rounds([here / "long" / "results.json"])}
cells = [c for c in sides["long (51-82 s)"] if c in sides["short (8-18 s)"]]
print("| cell | figure | " + " | ".join(f"{s}, per round" for s in sides) + " |")
print("|---|---|---|---|")
for cell in cells:
    systems = list(sides["long (51-82 s)"][cell][0])
    for s in systems:
        cols = [fmt_tok([r[s]["output_tok_s"] for r in sides[side][cell]]) for side in sides]
        secs = [statistics.median(r[s]["wall_s"] for r in sides[side][cell]) for side in sides]
        print(f"| {cell} | {s} tok/s ({secs[0]:.0f} s / {secs[1]:.0f} s) | {cols[0]} | {cols[1]} |")
    if "routed" not in systems:
        a, b = systems[1], systems[0]
        print(f"| {cell} | {a} / {b} | "
              + " | ".join(fmt([r[a]["output_tok_s"] / r[b]["output_tok_s"]
                                for r in sides[side][cell]]) for side in sides) + " |")
        continue
    for name, num, dens in (("routed / better forced", "routed",
                             ("forced-vanilla", "forced-speculative")),
                            ("forced-spec / forced-van", "forced-speculative",
                             ("forced-vanilla",))):
        cols = []
        for side in sides:
            rs = sides[side][cell]
            best = max(dens, key=lambda d: statistics.median(r[d]["output_tok_s"] for r in rs))
            cols.append(fmt([r[num]["output_tok_s"] / r[best]["output_tok_s"] for r in rs]))
        print(f"| {cell} | {name} | {cols[0]} | {cols[1]} |")
