"""The report of `python -m bench.budget_trace`: report.md (targets first, then per-phase tables)
and replicas.png (offered load, each system's goodput and the autoscaled system's replicas over
time)."""

from __future__ import annotations

from pathlib import Path

AUTOSCALED = "autoscaled"
BUCKET_S = 15.0  # time bins of the plot


def static_systems(results: dict) -> list[str]:
    """Every system measured but the autoscaled one: the static splits and vllm-switch."""
    return [n for n in results["systems"] if n != AUTOSCALED]


def best_static(results: dict, key: str, figure: str = "goodput_tok_s") -> tuple[str, float]:
    """(name, value) of the static system with the most `figure` in cell `key`."""
    values = {n: results["systems"][n]["figures"][key][figure] for n in static_systems(results)}
    name = max(values, key=values.get)
    return name, values[name]


def mean_accelerators(system: dict, end_s: float, tp: int = 1) -> float | None:
    """Mean accelerators a system held over [0, end_s]: its polled RUNNING replicas (every
    `POLL_S` s) as a step function × `tp` accelerators each; None without a timeline."""
    tl = [r for r in system.get("timeline", []) if r["t_s"] <= end_s]
    if not tl or end_s <= 0:
        return None
    held = 0.0
    for row, nxt in zip(tl, tl[1:] + [{"t_s": end_s}]):
        held += (row.get("vanilla", 0) + row.get("speculative", 0)) * (nxt["t_s"] - row["t_s"])
    return round(tp * held / (end_s - tl[0]["t_s"]), 3) if end_s > tl[0]["t_s"] else None


def efficiency(results: dict) -> list[str]:
    """Per system: mean accelerators held over the trace and trace goodput per accelerator (a
    policy that meets the same load with fewer replicas frees the rest of the budget)."""
    end = sum(ph["seconds"] for ph in results["trace"])
    lines = ["| system | mean accelerators held | goodput tok/s | goodput tok/s per accelerator |",
             "| --- | --- | --- | --- |"]
    for n, system in results["systems"].items():
        held = mean_accelerators(system, end)
        good = system["figures"]["trace"]["goodput_tok_s"]
        per = f"{good / held:.1f}" if held else "-"
        lines.append(f"| {n} | {held if held is not None else '-'} | {good} | {per} |")
    return lines


def targets(results: dict) -> list[str]:
    """The two live targets, each with its ratio (autoscaled / best static)."""
    if AUTOSCALED not in results["systems"] or not static_systems(results):
        return ["(targets need the autoscaled system and at least one static one)"]
    auto = results["systems"][AUTOSCALED]["figures"]
    name, value = best_static(results, "trace")
    ratio = auto["trace"]["goodput_tok_s"] / value if value else float("inf")
    lines = [(f"- **over the trace**: autoscaled {auto['trace']['goodput_tok_s']:.1f} tok/s "
              f"goodput vs best static {name} {value:.1f}: **{ratio:.2f}x** (target ≥ 1.2x: "
              f"{'met' if ratio >= 1.2 else 'missed'})")]
    worst = []
    for ph in results["trace"]:
        key = f"{ph['name']}@settled"
        name, value = best_static(results, key)
        r = auto[key]["goodput_tok_s"] / value if value else float("inf")
        worst.append(r)
        lines.append(f"  - {ph['name']}, second half: autoscaled {auto[key]['goodput_tok_s']:.1f}"
                     f" vs best static {name} {value:.1f}: {r:.2f}x")
    lines.insert(1, f"- **each phase once settled** (its second half): lowest ratio "
                    f"**{min(worst):.2f}x** (target ≥ 0.95x: "
                    f"{'met' if min(worst) >= 0.95 else 'missed'})")
    return lines


def write_report(results: dict, out: Path) -> None:
    """Writes out/report.md and out/replicas.png from a (possibly partial) results dict."""
    names = list(results["systems"])
    slo = results["slo"]
    lines = ["# Budget split live vs static splits of the same budget", "",
             (f"`{results['command']}`; budget {results['budget']} accelerators; SLO TTFT ≤ "
              f"{slo['ttft_ms']:.0f} ms, TPOT ≤ {slo['tpot_ms']:.0f} ms; goodput = output tok/s "
              "of requests within the SLO."), "",
             "| phase | workload | arrivals/s | seconds |", "| --- | --- | --- | --- |"]
    lines += [f"| {ph['name']} | {ph['workload']} | {ph['rate_rps']} | {ph['seconds']:.0f} |"
              for ph in results["trace"]]
    reused = sorted({s["reused_from"] for s in results["systems"].values() if "reused_from" in s})
    if reused:
        lines += ["", "Static systems taken from " + ", ".join(f"`{r}`" for r in reused)
                  + " (the same trace and seed; their figures recomputed at this SLO: a static "
                  "split routes by S whatever the SLO); the autoscaled system ran here, planning "
                  "for this SLO."]
    lines += ["", "## Targets", "", *targets(results)]
    keys = [ph["name"] for ph in results["trace"]] + ["trace"]
    for figure, title in (("goodput_tok_s", "Goodput, tok/s (SLO attainment)"),
                          ("output_tok_s", "Output tok/s"),
                          ("tpot_p99_ms", "TPOT p99, ms")):
        lines += ["", f"## {title}", "", "| system | " + " | ".join(keys) + " |",
                  "| --- |" + " --- |" * len(keys)]
        for n in names:
            f = results["systems"][n]["figures"]
            cells = [f"{f[k][figure]}" + (f" ({f[k]['slo_attainment']:.0%})"
                                          if figure == "goodput_tok_s" else "") for k in keys]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "## Accelerators held", "", *efficiency(results)]
    lines += ["", "## Routes per phase", ""]
    for n in names:
        f = results["systems"][n]["figures"]
        lines.append(f"- {n}: " + "; ".join(f"{k} {f[k]['routes']}" for k in keys[:-1]))
    if AUTOSCALED in results["systems"]:
        lines += ["", "## The autoscaled system's decisions (`GET /admin/autoscaling`)", ""]
        for e in results["systems"][AUTOSCALED]["events"]:
            lines.append(f"- {e.get('pool')}: {e.get('action')} {e.get('previous')} -> "
                         f"{e.get('replicas')} ({e.get('reason')}; gain {e.get('gain')})")
    lines += ["", "Start to ready, s: " + ", ".join(
        f"{n} {results['systems'][n]['start_s']}" for n in names)]
    if "wall_s" in results:
        lines.append(f"Wall time: {results['wall_s']:.0f} s.")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plot(results, out / "replicas.png")


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (load, good, reps) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    end = sum(ph["seconds"] for ph in results["trace"])
    bins = [i * BUCKET_S for i in range(int(end // BUCKET_S) + 1)]
    for n, system in results["systems"].items():
        reqs = system["requests"]
        sent = [sum(1 for r in reqs if lo <= r["t_s"] < lo + BUCKET_S) / BUCKET_S for lo in bins]
        if n == next(iter(results["systems"])):
            load.step(bins, sent, where="post", color="black", label="arrivals/s")
        slo = results["slo"]
        good_tok = [sum(r["completion_tokens"] for r in reqs
                        if lo <= r["t_s"] < lo + BUCKET_S and r["ok"]
                        and r["ttft_s"] * 1000 <= slo["ttft_ms"]
                        and _tpot_ms(r) <= slo["tpot_ms"]) / BUCKET_S for lo in bins]
        good.plot(bins, good_tok, label=n, lw=2.5 if n == AUTOSCALED else 1)
    if AUTOSCALED in results["systems"]:
        tl = results["systems"][AUTOSCALED]["timeline"]
        for pool in ("vanilla", "speculative"):
            reps.step([r["t_s"] for r in tl], [r[pool] for r in tl], where="post", label=pool)
    start = 0.0
    for ph in results["trace"]:
        for ax in (load, good, reps):
            ax.axvline(start, color="grey", lw=0.5)
        load.text(start + 2, 0, ph["name"], va="bottom")
        start += ph["seconds"]
    load.set_ylabel("arrivals/s")
    good.set_ylabel("goodput tok/s (by send time)")
    reps.set_ylabel("autoscaled replicas")
    reps.set_xlabel("s since the trace's start")
    for ax in (load, good, reps):
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _tpot_ms(r: dict) -> float:
    """A request record's TPOT in ms (0 for a one-token answer, which meets any TPOT SLO)."""
    if r["completion_tokens"] < 2:
        return 0.0
    return 1000 * (r["latency_s"] - r["ttft_s"]) / (r["completion_tokens"] - 1)
