"""routed / better forced pool per cell and pass, router.allocate_load on (alloc-*) and off (rule-*).

    python summary.py [FOLDER]
"""
import json
import statistics
import sys
from pathlib import Path

here = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
forced = ("forced-vanilla", "forced-speculative")
rows: dict = {}
for side in ("alloc", "rule"):
    for run in sorted(here.glob(f"{side}-*/results.json")):
        cells = json.loads(run.read_text())["cells"]
        for cell, row in cells.items():
            if "routed" in row:
                r = row["routed"][0]["output_tok_s"]
                best = max(row[f][0]["output_tok_s"] for f in forced)
                mix = row["routed"][0]["route_mix"]
                rows.setdefault(cell, {}).setdefault(side, []).append(
                    (r / best, r, mix, row["routed"][0].get("host_sharing") or {}))
            elif {"one-pool", "both-pools"} <= set(row):
                v = row["both-pools"][0]["output_tok_s"] / row["one-pool"][0]["output_tok_s"]
                rows.setdefault(cell, {}).setdefault(side, []).append((v, None, {}, {}))
print("| cell | allocation on, pass 1, 2 | median | per-request rule, pass 1, 2 | median |")
print("|---|---|---|---|---|")
for cell, sides in rows.items():
    cols = []
    for side in ("alloc", "rule"):
        v = [x[0] for x in sides.get(side, [])]
        cols += [", ".join(f"{x:.2f}" for x in v) or "-",
                 f"{statistics.median(v):.2f}" if v else "-"]
    print(f"| {cell} | " + " | ".join(cols) + " |")
print()
for cell, sides in rows.items():
    for side, got in sides.items():
        for i, (_, tok, mix, hs) in enumerate(got, 1):
            if tok is not None:
                print(f"{cell} {side}-{i}: routed {tok:.0f} tok/s, mix {mix}, allocation "
                      f"{hs.get('allocation')}, slowdown {hs.get('slowdown')}")
