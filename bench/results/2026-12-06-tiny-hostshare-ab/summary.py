"""Summarize the alternating A/B (/work/ab52/{new,base}-{pass}): routed / better forced per cell."""
import json, pathlib, statistics, sys
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/work/ab52")
rows = {}
for d in sorted(root.iterdir()):
    f = d / "results.json"
    if not f.exists():
        continue
    side, p = d.name.split("-")
    cells = json.loads(f.read_text())["cells"]
    for key, systems in cells.items():
        if not key.startswith("mixed@") and not key.startswith("machine@"):
            continue
        if key.startswith("machine@"):
            r = systems["both-pools"][0]["output_tok_s"] / systems["one-pool"][0]["output_tok_s"]
        else:
            routed = systems["routed"][0]["output_tok_s"]
            best = max(systems["forced-vanilla"][0]["output_tok_s"],
                       systems["forced-speculative"][0]["output_tok_s"])
            r = routed / best
            reasons = systems["routed"][0].get("route_reasons", {})
        rows.setdefault(key, {}).setdefault(side, []).append((int(p), round(r, 3)))
order = sorted(rows, key=lambda k: (k.split("@")[0], int(k.split("@c")[1])))
print("| cell | new (routed / better forced, pass 1, 2) | median | base | median |")
print("|---|---|---|---|---|")
for k in order:
    out = [k]
    for side in ("new", "base"):
        v = [r for _, r in sorted(rows[k].get(side, []))]
        out += [", ".join(f"{x:.2f}" for x in v), f"{statistics.median(v):.2f}" if v else "-"]
    print("| " + " | ".join(out) + " |")
