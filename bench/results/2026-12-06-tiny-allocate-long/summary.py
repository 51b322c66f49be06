"""routed / better forced pool and each system's tok/s per run, allocation on (alloc-*) against
off (rule-*), as `ab.sh` ran them (alternating, one round a run).

    python summary.py
"""
import json
from pathlib import Path

here = Path(__file__).parent
print("| run | cell | routed | forced-vanilla | forced-speculative | routed / better forced | "
      "routed's route mix | allocation as routed |")
print("|---|---|---|---|---|---|---|---|")
for run in ("alloc-1", "rule-1", "alloc-2", "rule-2"):
    path = here / run / "results.json"
    if not path.exists():
        continue
    for cell, row in json.loads(path.read_text())["cells"].items():
        if "routed" not in row:
            one, both = row["one-pool"][0]["output_tok_s"], row["both-pools"][0]["output_tok_s"]
            print(f"| {run} | {cell} | one-pool {one:.0f}, both-pools {both:.0f} | | | "
                  f"both / one {both / one:.2f} | | |")
            continue
        tok = {s: v[0]["output_tok_s"] for s, v in row.items()}
        best = max(tok["forced-vanilla"], tok["forced-speculative"])
        r = row["routed"][0]
        print(f"| {run} | {cell} | {tok['routed']:.0f} | {tok['forced-vanilla']:.0f} | "
              f"{tok['forced-speculative']:.0f} | {tok['routed'] / best:.2f} | {r['route_mix']} | "
              f"{r.get('host_sharing', {}).get('allocation', '-')} |")
