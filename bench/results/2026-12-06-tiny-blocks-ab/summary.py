"""Spread of same-app ratios over the rounds, whole cells (b1-*) against interleaved blocks (b4-*).

    python summary.py [FOLDER]

For each cell: routed / better forced pool and forced-speculative / forced-vanilla, one value per
round (4 a side: two runs of two rounds), as median [min-max] and the half-range in % of the
median; for the blocks side also the block-by-block values pooled over its rounds.
"""
import json
import statistics
import sys
from pathlib import Path

here = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)


def rounds(side):
    out = {}
    for run in sorted(here.glob(f"{side}-*/results.json")):
        for cell, row in json.loads(run.read_text())["cells"].items():
            if "routed" not in row:
                continue
            for i in range(len(row["routed"])):
                out.setdefault(cell, []).append({s: runs[i] for s, runs in row.items()})
    return out


def fmt(v):
    m = statistics.median(v)
    return f"{m:.2f} [{min(v):.2f}-{max(v):.2f}] ±{max(max(v) - m, m - min(v)) / m:.0%}"


sides = {s: rounds(s) for s in ("b1", "b4")}
print("| cell | ratio | whole cells (b1), per round | blocks (b4), per round | b4 block by block |")
print("|---|---|---|---|---|")
for cell in sides["b1"]:
    for name, num, dens in (("routed / better forced", "routed", ("forced-vanilla", "forced-speculative")),
                            ("forced-spec / forced-van", "forced-speculative", ("forced-vanilla",))):
        cols = []
        for side in ("b1", "b4"):
            rs = sides[side].get(cell, [])
            if not rs:
                cols.append("-")
                continue
            best = max(dens, key=lambda d: statistics.median(r[d]["output_tok_s"] for r in rs))
            cols.append(fmt([r[num]["output_tok_s"] / r[best]["output_tok_s"] for r in rs]))
        rs = sides["b4"].get(cell, [])
        blocks = "-"
        if rs and all(r[num].get("blocks_tok_s") for r in rs):
            best = max(dens, key=lambda d: statistics.median(r[d]["output_tok_s"] for r in rs))
            blocks = fmt([a / b for r in rs for a, b in zip(r[num]["blocks_tok_s"],
                                                           r[best]["blocks_tok_s"])])
        print(f"| {cell} | {name} | {cols[0]} | {cols[1]} | {blocks} |")
