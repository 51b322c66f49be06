"""The benchmark's markdown report and PNG plots, from `bench.run`'s results dict.

Every cell holds one figures dict per round (`results["cells"][cell][system]` is a list). A figure
is reported as its median over the rounds with the min-max range in brackets; a ratio between two
systems is taken round by round (the two ran in the same round) and reported the same way. A
target counts as met only when the whole range clears it ("met"), as missed when the whole range
falls short ("missed"), and as "open" when the range straddles it.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from bench.workload import TEMPERATURE
from core.step_time import bucket_of

TASKS = ("code", "math", "extraction", "chat", "creative")
SPREAD_TARGET = 0.10  # a repeated cell's range within ±10% of its median (issue 28)
PREDICTION_TARGET = 0.15  # predicted S within ±15% of realized, per task (issue 30)


def median(runs: list[dict], key: str) -> float | None:
    """The median of `key` over the rounds that have it (None: none has)."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _shown(runs: list[dict], key: str) -> float | str:
    """`median` for a report's table: rounded to 2 decimals ("-" when no round has it)."""
    m = median(runs, key)
    return "-" if m is None else round(m, 2)


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of `values` (at least one)."""
    return statistics.median(values), min(values), max(values)


def fmt(values: list[float], digits: int = 0) -> str:
    """"median [min-max]" (just the value for one round)."""
    m, lo, hi = spread(values)
    if len(values) == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def verdict(ratios: list[float], target: float, at_most: bool = False) -> str:
    """"met" when every round clears `target` (is ≥ it; ≤ it with `at_most`), "missed" when none
    does, else "open"."""
    if at_most:
        return verdict([-r for r in ratios], -target)
    if min(ratios) >= target:
        return "met"
    return "missed" if max(ratios) < target else "open"


def write_report(results: dict, out: Path) -> None:
    """Writes `out/report.md` and the plots (`throughput.png`, `tpot_p99.png`,
    `speedup_by_task.png`)."""
    cells = results["cells"]
    systems = list(dict.fromkeys(s for key, row in cells.items() if not key.startswith("machine@")
                                 for s in row))
    wl = results.get("workload", "mixed")
    sweep = sorted((int(k.split("@c")[1]), k) for k in cells if k.startswith(f"{wl}@c"))
    heldout = [] if wl == "heldout" else sorted(
        (int(k.split("@c")[1]), k) for k in cells if k.startswith("heldout@c"))
    long = sorted((int(k.split("@c")[1]), k) for k in cells if k.startswith("long@c"))
    rates = [k for k in cells if k.startswith("poisson@")]
    rounds = max((len(runs) for row in cells.values() for runs in row.values()), default=0)
    starts = ", ".join(f"{k} {fmt(v['start_s'])} s" for k, v in results["apps"].items())
    lines = ["# specserve benchmark", "",
             f"Command: `{results['command']}`  ", f"Machine: {results['machine']}  ",
             f"Client: {results.get('client', 'own')}; engines: "
             f"{results.get('engines', 'see command')}"
             f"{', seeded per round' if results.get('engine_seed') else ''}; rounds: {rounds}"
             f"{_blocks_said(results.get('blocks', 1))} "
             "(figures: median "
             f"[min-max] over the rounds; ratios taken round by round)  ",
             f"Wall time: {results.get('wall_s', 0):.0f} s; application start times: {starts}  ",
             f"SLO for goodput: TTFT ≤ {results['slo']['ttft_ms']:.0f} ms and TPOT ≤ "
             f"{results['slo']['tpot_ms']:.0f} ms.", "",
             "## Targets (equal accelerator budget)", ""]
    lines += _targets(results, cells, sweep, rates, [*heldout, *long])
    lines += _sweep_table(f"Closed-loop sweep, {wl} workload", cells, sweep, systems)
    if heldout:
        lines += _sweep_table("Closed-loop sweep, held-out workload (prompts the classifier "
                              "was not fitted on, bench/prompts/README.md)", cells, heldout,
                              systems)
    if long:
        lines += _sweep_table("Closed-loop sweep, long prompts (bench/workload.py `long_jobs`: "
                              f"{results.get('args', {}).get('long_tokens', '?')} tokens of "
                              "third-party source each, half code completions, half chat)",
                              cells, long, systems)
    if "code@c1" in cells:
        lines += ["", "## Code prompts at concurrency 1", "", "| system | tok/s | TTFT p50 ms | "
                  "TPOT p50 ms | route mix |", "|---|---|---|---|---|"]
        lines += [f"| {s} | {_fig(r, 'output_tok_s')} | {_shown(r, 'ttft_p50_ms')} | "
                  f"{_shown(r, 'tpot_p50_ms')} | {_mix(r)} |" for s, r in cells["code@c1"].items()]
    if rates:
        lines += ["", f"## Poisson arrivals, {wl} workload: goodput req/s (SLO attainment, "
                  "TTFT p99 ms, TPOT p99 ms)", "",
                  "| rate req/s | " + " | ".join(systems) + " |", "|---|" + "---|" * len(systems)]
        for key in rates:
            row = cells[key]
            lines.append(f"| {key.split('@')[1]} | " + " | ".join(
                f"{_fig(row[s], 'goodput_req_s', 2)} ({median(row[s], 'slo_attainment'):.0%}, "
                f"{_shown(row[s], 'ttft_p99_ms')}, {_shown(row[s], 'tpot_p99_ms')})"
                if s in row else "-" for s in systems) + " |")
    for key in (k for k in cells if k.startswith("machine@")):
        lines += ["", f"## The machine with one pool busy vs both ({key}, {wl} workload)", "",
                  "| system | tok/s | TPOT p50 / p99 ms | route mix |", "|---|---|---|---|"]
        lines += [f"| {s} | {_fig(r, 'output_tok_s')} | {_shown(r, 'tpot_p50_ms')} / "
                  f"{_shown(r, 'tpot_p99_ms')} | {_mix(r)} |" for s, r in cells[key].items()]
    lines += _cpu(cells)
    lines += _spreads(cells)
    lines += _blocks(cells)
    lines += _speedup_curve(results.get("speedup_curve"))
    lines += predicted_vs_realized(results, cells, sweep)
    lines += step_times_vs_realized(results, cells, sweep)
    lines += tokens_vs_realized(cells, sweep)
    lines += step_samples_by_bucket(cells, sweep)
    if long and results.get("speedup_curves_long"):
        lines += predicted_vs_realized(results, cells, long, results["speedup_curves_long"],
                                        "long prompts, S(B, L) at their context")
    lines += ["", "## Routed: route mix per cell (all rounds; by task: speculative / vanilla; "
              "the router's reasons, round by round)", ""]
    lines += [f"- {key}: {_mix(row['routed'])}; {mix_by_task(row['routed'])}; reasons "
              + " | ".join(route_reasons(r) for r in row["routed"])
              for key, row in cells.items() if "routed" in row]
    lines += ["", "## Acceptance (vLLM's client, from `vllm:spec_decode_*` before and after each "
              "cell): mean acceptance length (acceptance rate %)", "",
              "| cell | " + " | ".join(systems) + " |", "|---|" + "---|" * len(systems)]
    for key, row in cells.items():
        lines.append(f"| {key} | " + " | ".join(_acceptance(row.get(s, [])) for s in systems)
                     + " |")
    errors = {f"{k}/{s}": r["first_error"] for k, row in cells.items() for s, runs in row.items()
              for r in runs if r["errors"]}
    lines += ["", "## Errors", ""] + ([f"- {k}: {e}" for k, e in errors.items()] or ["none"])
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plots(cells, systems, sweep, out)


def _sweep_table(title: str, cells: dict, sweep: list[tuple[int, str]], systems: list[str]
                 ) -> list[str]:
    """A closed-loop sweep's rows: output tok/s median [min-max] (TPOT p50 / p99 ms) per system."""
    lines = ["", f"## {title}: output tok/s (TPOT p50 / p99 ms)", "",
             "| concurrency | " + " | ".join(systems) + " |", "|---|" + "---|" * len(systems)]
    for c, key in sweep:
        row = cells[key]
        lines.append(f"| {c} | " + " | ".join(
            f"{_fig(row[s], 'output_tok_s')} ({_shown(row[s], 'tpot_p50_ms')} / "
            f"{_shown(row[s], 'tpot_p99_ms')})" if s in row else "-" for s in systems) + " |")
    return lines


def _fig(runs: list[dict], key: str, digits: int = 0) -> str:
    values = [r[key] for r in runs if r.get(key) is not None]
    return fmt(values, digits) if values else "-"


def _mix(runs: list[dict]) -> dict:
    """Requests per route summed over the rounds."""
    out: dict[str, int] = {}
    for r in runs:
        for route, n in r["route_mix"].items():
            out[route] = out.get(route, 0) + n
    return out


def route_reasons(run: dict) -> str:
    """One round's "route/reason n" counts (`specserve_requests_total`'s `reason` label), most
    first; "-" before runs recorded them."""
    got = sorted(run.get("route_reasons", {}).items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {n}" for k, n in got) or "-"


def mix_by_task(runs: list[dict]) -> str:
    """Each task's speculative/vanilla requests summed over `runs` (`code 8/0, math 10/1`, tasks
    sorted); "" when no run recorded them."""
    tasks: dict[str, list[int]] = {}
    for r in runs:
        for task, mix in r.get("route_mix_by_task", {}).items():
            t = tasks.setdefault(task, [0, 0])
            t[0] += mix.get("speculative", 0)
            t[1] += mix.get("vanilla", 0)
    return ", ".join(f"{task} {s}/{v}" for task, (s, v) in sorted(tasks.items()))


def _acceptance(runs: list[dict]) -> str:
    got = [r["acceptance"] for r in runs if r.get("acceptance")]
    if not got:
        return "-"
    return (f"{fmt([a['mean_acceptance_length'] for a in got], 2)} "
            f"({statistics.median(a['acceptance_rate'] for a in got):.0f}%)")


def _ratio(row: dict, a: str, bs: list[str], key: str = "output_tok_s"):
    """Round-by-round ratios of `a` to the best of `bs` by median, and that best's name; None
    when a system is missing."""
    others = [(median(row[b], key) or 0.0, b) for b in bs if b in row]
    if a not in row or not others:
        return None
    best = max(others)[1]
    return [x[key] / y[key] if y[key] else float("inf")
            for x, y in zip(row[a], row[best])], best


def _target(ratios: list[float], target: float, at_most: bool = False) -> str:
    """"**median x** [min-max] (verdict vs ≥ target" (≤ with `at_most`; the caller closes the
    parenthesis)."""
    m, lo, hi = spread(ratios)
    rng = f" [{lo:.2f}-{hi:.2f}]" if len(ratios) > 1 else ""
    sign = "≤" if at_most else "≥"
    return f"**{m:.2f}x**{rng} ({verdict(ratios, target, at_most)} vs {sign} {target}"


def _targets(results, cells, sweep, rates, heldout=()) -> list[str]:
    """The targets at an equal accelerator budget, each with its ratios measured in this run
    (`heldout`: the held-out and long-prompt sweeps' (concurrency, cell) pairs, judged like the
    sweep's)."""
    out = []
    n = results.get("budget", 2)
    singles = [s for s in dict.fromkeys(s for row in cells.values() for s in row)
               if s.endswith(f"-x{n}")]
    forced = ["forced-vanilla", "forced-speculative"]
    # The GPU's shape (issue 30), one replica each on the routed app: speculation pays on code at
    # concurrency 1 and costs on the mix at the sweep's top concurrency.
    low = _ratio(cells.get("code@c1", {}), "forced-speculative", ["forced-vanilla"])
    high = _ratio(cells[sweep[-1][1]], "forced-speculative", ["forced-vanilla"]) if sweep else None
    if low and high:
        out.append(f"- the shape, one replica each: forced-speculative / forced-vanilla tok/s = "
                   f"{_target(low[0], 1.8)}) on code at concurrency 1, "
                   f"{_target(high[0], 0.9, at_most=True)}) at {sweep[-1][1]}")
    out += _every_level(cells, sweep, list(heldout), singles, forced, n)
    for key, row in cells.items():
        if key.startswith("machine@") and {"one-pool", "both-pools"} <= set(row):
            r = [b["output_tok_s"] / a["output_tok_s"]
                 for a, b in zip(row["one-pool"], row["both-pools"])]
            streams = key.split("@c")[-1]
            out.append(f"- {key}: machine tok/s with both pools busy / one pool alone = "
                       f"{_target(r, 1.5)}); where the cores went: the table 'Cores busy per "
                       f"part of the stack'; what two engines make with no frontend, "
                       f"{streams} streams on one or half on each: `python -m bench.memory_bus "
                       f"--batches {max(1, int(streams) // 2)} {streams}` (its split ceiling)")
    for _, key in [*sweep, *heldout]:
        own = _ratio(cells[key], "routed", forced)
        eq = _ratio(cells[key], "routed", singles)
        if own and eq:
            out.append(f"- {key}: routed / better own pool = {_target(own[0], 0.95)}, "
                       f"{own[1]}); routed / best at equal budget = {_target(eq[0], 0.95)}, "
                       f"{eq[1]})")
    for key in rates:
        eq = _ratio(cells[key], "routed", singles, "goodput_req_s")
        if eq:
            out.append(f"- {key}: routed goodput / best at equal budget = "
                       f"{_target(eq[0], 0.95)}, {eq[1]})")
    code = _ratio(cells.get("code@c1", {}), "routed", [f"vanilla-x{n}"])
    if code:
        out.append(f"- code prompts, concurrency 1: routed / vanilla-x{n} tok/s = "
                   f"{_target(code[0], 2.0)})")
    if results.get("decision_latency"):
        d = results["decision_latency"]
        out.append(f"- route decision in-process (features + classifier + policy, {d['decisions']} "
                   f"mixed requests): p50 {d['p50_us']} µs, p99 {d['p99_us']} µs")
    if results.get("overhead"):
        o = results["overhead"]
        out.append(f"- router overhead vs Ray Serve LLM's stock ingress on the same pool "
                   f"(1-token requests, {o['requests']} each, {o.get('concurrency', 1)} at a "
                   f"time): p50 {o['overhead_p50_ms']} ms, p99 {o['overhead_p99_ms']} ms "
                   f"(target p99 < 2 ms); latencies specserve p50/p99 {o['specserve_p50_ms']}/"
                   f"{o['specserve_p99_ms']} ms, stock {o['direct_p50_ms']}/"
                   f"{o['direct_p99_ms']} ms")
    return out


def crossover_band(cells: dict, sweep: list[tuple[int, str]], n: int) -> list[tuple[int, str]]:
    """The sweep's crossover band: the last level at which the best speculative-xN system made
    more output tok/s than vanilla-xN (medians) and the next level, at which none did; [] when
    the sweep has no such pair (speculation pays everywhere, nowhere, or a system is missing).
    `bench.run.crossover` answers a different question (the largest level at which one method
    beat vanilla, for vllm-switch's table) and cannot be shared: bench.run imports this module.

    Args:
        sweep: (concurrency, cell) pairs in increasing concurrency.
        n: the budget (replicas of each single system).
    """
    def pays(key: str) -> bool | None:
        row = cells[key]
        vanilla = median(row.get(f"vanilla-x{n}", []), "output_tok_s")
        spec = [median(runs, "output_tok_s") for s, runs in row.items()
                if s.startswith("speculative-") and s.endswith(f"-x{n}")]
        if vanilla is None or not spec:
            return None
        return max(spec) > vanilla
    flags = [(level, pays(level[1])) for level in sweep]
    for (a, pa), (b, pb) in zip(flags, flags[1:]):
        if pa and pb is False:
            return [a, b]
    return []


def _every_level(cells, sweep, other, singles, forced, n) -> list[str]:
    """Issue 30's routing targets, one line each over the whole run: routed ≥ 1.0x the best
    single system at equal budget at every sweep level, ≥ 1.25x at some level of the crossover
    band (`crossover_band`), and routed ≥ 0.95x the better of its own forced pools at every
    level of the sweep and of `other` (held-out, long-prompt cells). A level counts as met only
    when its every round clears the target."""
    out = []

    def summary(levels, against, target):
        ratios = {key: r[0] for _, key in levels if (r := _ratio(cells[key], "routed", against))}
        if not ratios:
            return None
        missed = [f"{key} {_target(r, target).split(' (')[0]}" for key, r in ratios.items()
                  if verdict(r, target) != "met"]
        return (f"met at {len(ratios) - len(missed)} of {len(ratios)} levels"
                + (f"; not met: {', '.join(missed)}" if missed else ""))
    eq = summary(sweep, singles, 1.0)
    if eq:
        out.append("- routed / best single system at equal budget, every sweep level (≥ 1.0): "
                   + eq)
    band = crossover_band(cells, sweep, n)
    if band:
        best = max(((r[0], key) for _, key in band if (r := _ratio(cells[key], "routed", singles))),
                   key=lambda x: statistics.median(x[0]), default=None)
        if best:
            out.append(f"- in the crossover band ({band[0][1]}-{band[1][1]}: speculative-x{n} "
                       f"beats vanilla-x{n} at the first, not at the second): routed / best single"
                       f" system = {_target(best[0], 1.25)}) at {best[1]}")
    elif sweep:
        out.append(f"- crossover band: none in this sweep (speculative-x{n} beats vanilla-x{n} "
                   "at every level, at none, or a system did not run)")
    own = summary([*sweep, *other], forced, 0.95)
    if own:
        out.append(f"- routed / better own pool (auto vs forced, same app), every level of the "
                   f"sweeps (≥ 0.95): {own}")
    return out


def _cpu(cells: dict) -> list[str]:
    """Cores each part of the stack kept busy per cell and system (median over rounds)."""
    kinds = sorted({k for row in cells.values() for runs in row.values() for r in runs
                    for k in r.get("cpu", {})})
    if not kinds:
        return []
    out = ["", "## Cores busy per part of the stack (CPU s / wall s, median over rounds)", "",
           "| cell | system | " + " | ".join(kinds) + " | load avg 1 min |",
           "|---|---|" + "---|" * (len(kinds) + 1)]
    for key, row in cells.items():
        for s, runs in row.items():
            cpu = [r.get("cpu", {}) for r in runs]
            out.append(f"| {key} | {s} | " + " | ".join(
                f"{statistics.median(c.get(k, 0.0) for c in cpu):.2f}" for k in kinds)
                + f" | {_shown(runs, 'load_avg_1m')} |")
    return out


def _spreads(cells: dict) -> list[str]:
    """Per system, the widest tok/s range (largest distance from the median, in % of it) over
    the cells it repeated; cells beyond ±10% listed."""
    widest: dict[str, tuple[float, str]] = {}
    beyond = []
    for key, row in cells.items():
        for s, runs in row.items():
            values = [r["output_tok_s"] for r in runs]
            if len(values) < 2 or not statistics.median(values):
                continue
            m, lo, hi = spread(values)
            w = max(hi - m, m - lo) / m
            if w > widest.get(s, (-1.0, ""))[0]:
                widest[s] = (w, key)
            if w > SPREAD_TARGET + 1e-9:
                beyond.append(f"{key}/{s} ±{w:.0%}")
    if not widest:
        return []
    return ["", f"## Spread of repeated cells (tok/s; target within ±{SPREAD_TARGET:.0%} of the "
                "median)", "", "Widest per system: " + ", ".join(
                    f"{s} ±{w:.0%} ({key})" for s, (w, key) in widest.items()),
            "", "Beyond the target: " + (", ".join(beyond) or "none")]


def _blocks_said(blocks: int) -> str:
    """The header's note on `--blocks` ("" for whole cells)."""
    return "" if blocks <= 1 else (f"; the routed application's closed-loop cells in up to "
                                   f"{blocks} interleaved blocks (see 'Interleaved blocks'; "
                                   "each block fills and drains on its own: compare its "
                                   "systems with each other, not with the single systems)")


def _blocks(cells: dict) -> list[str]:
    """The routed application's interleaved blocks (`bench.run --blocks`, bench/cells.py): per
    cell, routed / the better forced pool (by the cell's median) block by block, median
    [min-max] over every block of every round, beside the same ratio over each round's pooled
    blocks (round by round, as the targets take it). Blocks of one turn ran seconds apart, so
    their ratio carries the machine's fast noise but not its drift over minutes."""
    forced = ["forced-vanilla", "forced-speculative"]
    rows = []
    for key, row in cells.items():
        got = _ratio(row, "routed", forced)
        if not got or not all(r.get("blocks_tok_s") for r in row["routed"]):
            continue
        per_block = [a / b for x, y in zip(row["routed"], row[got[1]])
                     for a, b in zip(x["blocks_tok_s"], y["blocks_tok_s"]) if b]
        k = len(row["routed"][0]["blocks_tok_s"])
        rows.append(f"| {key} | {k} | {fmt(per_block, 2)} | {fmt(got[0], 2)} | {got[1]} |")
    if not rows:
        return []
    return ["", "## Interleaved blocks: routed / better forced pool", "",
            "| cell | blocks a round | block by block | pooled blocks, round by round | against |",
            "|---|---|---|---|---|", *rows]


def _speedup_curve(curve: dict | None) -> list[str]:
    """The router's S(B) per task at temperature 0, from `GET /admin/speedup` after the sweep."""
    if not curve:
        return []
    tasks = {task: t for task, t in curve["tasks"].items() if t["curve"]}
    rows = next(iter(tasks.values()))["curve"] if tasks else []
    out = ["", "## Profiled S(B) (router's step-time model after the sweep; temperature 0)", "",
           "| batch | vanilla step ms | speculative step ms | " +
           " | ".join(f"S {t}" for t in tasks) + " |", "|---|---|---|" + "---|" * len(tasks)]
    for i, r in enumerate(rows):
        out.append(f"| {r['batch']} | {r['vanilla_step_ms']:.1f} | {r['speculative_step_ms']:.1f} "
                   "| " + " | ".join(f"{t['curve'][i]['speedup']:.2f}" for t in tasks.values())
                   + " |")
    out += ["", f"Speculation pays (S ≥ {curve['min_speedup']}) at every batch up to: " +
            ", ".join(f"{task} {t['pays_up_to_batch']}" + _also_pays(t)
                      for task, t in curve["tasks"].items()) +
        "; E[τ] per task: " + ", ".join(f"{task} {t['curve'][0]['expected_tokens']:.2f}"
                                        for task, t in tasks.items())]
    return out


def _also_pays(task_curve: dict) -> str:
    """" (also at 128)" for paying batches beyond `pays_up_to_batch` (older reports: none)."""
    beyond = [b for b in task_curve.get("pays_at_batches", [])
              if b > task_curve["pays_up_to_batch"]]
    return f" (also at {', '.join(map(str, beyond))})" if beyond else ""


def curve_at(curves: dict, task: str, temperature: float, batch: int) -> float | None:
    """The router's S for `task` at `temperature` and the curve's batch nearest `batch` in log2
    (None: no curve at that temperature or none for the task).

    Args:
        curves: {str(float temperature): `GET /admin/speedup?temperature=` reply}.
    """
    row = curve_row_at(curves, task, temperature, batch)
    return row["speedup"] if row else None


def curve_row_at(curves: dict, task: str, temperature: float, batch: int) -> dict | None:
    """The router's S(B) row for `task` at `temperature` at the curve's batch nearest `batch` in
    log2: {"batch", "vanilla_step_ms", "speculative_step_ms", "expected_tokens", "speedup"}
    (`SpeedupModel.curve`; None: no curve at that temperature or none for the task)."""
    rows = (curves.get(str(float(temperature))) or {}).get("tasks", {}).get(task, {}).get("curve")
    if not rows:
        return None
    return min(rows, key=lambda r: abs(math.log2(r["batch"]) - math.log2(batch)))


def predicted_steps(curves: dict, batch: int) -> dict[str, float] | None:
    """The router's step times behind its S at the curve's batch nearest `batch`: {"batch",
    "vanilla_step_ms", "speculative_step_ms"} (the same for every task and temperature; read
    from the code curve at temperature 0), None without one."""
    row = curve_row_at(curves, "code", 0.0, batch)
    return ({k: row[k] for k in ("batch", "vanilla_step_ms", "speculative_step_ms")}
            if row else None)


def predicted_vs_realized(results: dict, cells: dict, sweep, curves: dict | None = None,
                           label: str = "") -> list[str]:
    """Per task at each sweep level: the router's S(B = c) at the task's workload temperature
    against the realized S = forced-vanilla / forced-speculative TPOT p50 of that task (one
    replica each, so a closed loop of c keeps c requests in its engine), round by round.

    Two predictions: "as routed", the router's S read right after the routed system ran the cell
    (`predicted_s` of its figures, bench/cells.py: the S it priced that cell's requests with),
    which the ±15% target counts; and "after the sweep", the S the router held after every cell
    of round 1 (later cells, long prompts among them, move it). Results before 2026-12-06 have only
    the second (their count is on it); results without per-temperature curves (before
    2026-12-04) predict at temperature 0 only, so their chat and creative rows show none.

    Args:
        curves: {temperature: `GET /admin/speedup` answer} for "after the sweep" (default: the
            run's `speedup_curves`); `label` names them in the section's title.
    """
    if curves is None:
        curves = results.get("speedup_curves") or {}
        if not curves and results.get("speedup_curve"):
            curves = {"0.0": results["speedup_curve"]}
    out, hits, totals = [], [0, 0], [0, 0]  # [as routed, after the sweep]
    for c, key in sweep:
        row = cells[key]
        if "forced-vanilla" not in row or "forced-speculative" not in row:
            continue
        for task in TASKS:
            realized = [v["tpot_p50_ms_by_task"][task] / s["tpot_p50_ms_by_task"][task]
                        for v, s in zip(row["forced-vanilla"], row["forced-speculative"])
                        if v["tpot_p50_ms_by_task"].get(task)
                        and s["tpot_p50_ms_by_task"].get(task)]
            if not realized:
                continue
            routed = [p for r in row.get("routed", [])
                      if (p := (r.get("predicted_s") or {}).get(task)) is not None]
            after = curve_at(curves, task, TEMPERATURE[task], c)
            cols = []
            for i, (pred, shown) in enumerate((
                    (statistics.median(routed), fmt(routed, 2)) if routed else (None, ""),
                    (after, f"{after:.2f}" if after is not None else ""))):
                if pred is None:
                    cols += ["-", "-"]
                    continue
                error = pred / statistics.median(realized) - 1
                totals[i] += 1
                hits[i] += abs(error) <= PREDICTION_TARGET
                cols += [shown, f"{error:+.0%}"]
            out.append(f"| {c} | {task} (t={TEMPERATURE[task]}) | {' | '.join(cols)} | "
                       f"{fmt(realized, 2)} |")
    if not out:
        return []
    counts = (f"Within ±{PREDICTION_TARGET:.0%}: as routed {hits[0]} of {totals[0]} cells; after "
              f"the sweep {hits[1]} of {totals[1]}.")
    return ["", "## Predicted vs realized S per task (router's S(B = concurrency) as it routed "
            "the cell and after the sweep; realized: forced-vanilla / forced-speculative TPOT "
            "p50)" + (f": {label}" if label else ""), "",
            "| concurrency | task | predicted S as routed | error | predicted S after the sweep "
            "| error | realized S |", "|---|---|---|---|---|---|---|", *out, "", counts]


def step_times_vs_realized(results: dict, cells: dict, sweep) -> list[str]:
    """Where a predicted S goes wrong: the two step times it is the ratio of, against what the
    forced pools lived at that concurrency (one replica each, the other pool idle).

    Predicted: the router's T_v(B) and T_s(B) at B = c, as it routed the cell (`predicted_steps`
    of the routed figures, bench/cells.py; results before 2026-12-07 have none) and after the
    sweep. Realized, median over the rounds: each forced pool's mean inter-chunk latency
    (`itl_mean_ms`, bench/serve_client.py `chunk_figures`: one chunk per request per engine step,
    so seconds per step as a request lived it, what the router's samples measure). Results
    before 2026-12-08 have no chunk figures: there vanilla is forced-vanilla's TPOT p50 and
    speculative forced-speculative's TPOT p50 × its mean acceptance length, which mixes a median
    request with the mean token (the low-acceptance tasks' longer TPOT sets the median).
    """
    curves = results.get("speedup_curves") or {}
    if not curves and results.get("speedup_curve"):
        curves = {"0.0": results["speedup_curve"]}
    out, by_chunks = [], None
    for c, key in sweep:
        row = cells[key]
        van, spec = row.get("forced-vanilla"), row.get("forced-speculative")
        if not van or not spec:
            continue
        if all(r.get("itl_mean_ms") for r in van + spec):
            by_chunks = True if by_chunks is None else by_chunks
            real_v = statistics.median(r["itl_mean_ms"] for r in van)
            real_s = statistics.median(r["itl_mean_ms"] for r in spec)
        else:
            by_chunks = False
            real_v = statistics.median(r["tpot_p50_ms"] for r in van)
            per_step = [r["tpot_p50_ms"] * r["acceptance"]["mean_acceptance_length"]
                        for r in spec if (r.get("acceptance") or {}).get("mean_acceptance_length")]
            real_s = statistics.median(per_step) if per_step else None
        routed = [p for r in row.get("routed", []) if (p := r.get("predicted_steps"))]
        after = predicted_steps(curves, c)
        cols = []
        for name, real in (("vanilla_step_ms", real_v), ("speculative_step_ms", real_s)):
            as_routed = [p[name] for p in routed if p.get(name)]
            for values in (as_routed, [after[name]] if after else []):
                if not values or not real:
                    cols += ["-", "-"]
                    continue
                cols += [fmt(values, 1), f"{statistics.median(values) / real - 1:+.0%}"]
            cols.append(f"{real:.1f}" if real else "-")
        out.append(f"| {c} | {' | '.join(cols)} |")
    if not out:
        return []
    realized = ("each forced pool's mean inter-chunk latency" if by_chunks else
                "forced-vanilla TPOT p50, forced-speculative TPOT p50 × mean acceptance length")
    return ["", "## Step times behind the predicted S (ms per engine step at B = concurrency: "
            f"the router's, as routed and after the sweep; realized: {realized})", "",
            "| concurrency | T_v as routed | error | T_v after the sweep | error | T_v realized "
            "| T_s as routed | error | T_s after the sweep | error | T_s realized |",
            "|---|---|---|---|---|---|---|---|---|---|---|", *out]


def tokens_vs_realized(cells: dict, sweep) -> list[str]:
    """The other factor of a predicted S: the router's E[τ] per task as it routed the cell
    (`predicted_tokens` of the routed figures, bench/cells.py) against the tokens per step each
    task lived on the forced-speculative pool (`tokens_per_chunk_by_task`,
    bench/serve_client.py `chunk_figures`), median over the rounds; forced-vanilla's tokens per
    chunk, 1.0 when every engine step reaches the client as its own chunk, checks the measure.
    Empty for results before 2026-12-08 (no chunk figures)."""
    out = []
    for c, key in sweep:
        row = cells[key]
        spec, van = row.get("forced-speculative") or [], row.get("forced-vanilla") or []
        if not spec or not all(r.get("tokens_per_chunk_by_task") for r in spec):
            continue
        check = [v for r in van for v in (r.get("tokens_per_chunk_by_task") or {}).values()]
        for task in TASKS:
            lived = [r["tokens_per_chunk_by_task"][task] for r in spec
                     if r["tokens_per_chunk_by_task"].get(task)]
            if not lived:
                continue
            routed = [p for r in row.get("routed", [])
                      if (p := (r.get("predicted_tokens") or {}).get(task)) is not None]
            error = (f"{statistics.median(routed) / statistics.median(lived) - 1:+.0%}"
                     if routed else "-")
            out.append(f"| {c} | {task} (t={TEMPERATURE[task]}) | "
                       f"{fmt(routed, 2) if routed else '-'} | {error} | {fmt(lived, 2)} | "
                       f"{f'{statistics.median(check):.2f}' if check else '-'} |")
    if not out:
        return []
    return ["", "## Tokens per speculative step behind the predicted S (router's E[τ] as routed; "
            "realized: output tokens per streamed chunk on the forced-speculative pool)", "",
            "| concurrency | task | E[τ] as routed | error | realized | forced-vanilla tokens "
            "per chunk |", "|---|---|---|---|---|---|", *out]


def step_samples_by_bucket(cells: dict, sweep) -> list[str]:
    """What fed the router's step times during each routed cell: its folded samples (`GET
    /admin/step_samples`, kept as `step_samples` of the routed figures by bench/cells.py; over
    every round) per pool and bucket (the power of two nearest the requests in the engine, as
    `core.step_time` files them): how many, the median step as measured, the share taken while
    the other pool was busy, the median ρ they were divided by and the median step folded.
    Empty for results before 2026-12-08 (no samples kept)."""
    out = []
    for c, key in sweep:
        samples = [x for r in cells[key].get("routed", []) for x in (r.get("step_samples") or [])]
        groups: dict[tuple[str, int], list[dict]] = {}
        for x in samples:
            bucket = 2 ** bucket_of(x["batch"])
            groups.setdefault((x["pool"], bucket), []).append(x)
        for (pool, bucket), xs in sorted(groups.items()):
            rhos = [x["slowdown"] for x in xs if x["slowdown"]]
            out.append(f"| {c} | {pool} | {bucket} | {len(xs)} | "
                       f"{statistics.median(x['step_ms'] for x in xs):.1f} | "
                       f"{sum(x['other_busy'] for x in xs) / len(xs):.0%} | "
                       f"{f'{statistics.median(rhos):.2f}' if rhos else '-'} | "
                       f"{statistics.median(x['folded_ms'] for x in xs):.1f} |")
    if not out:
        return []
    return ["", "## The router's step-time samples during each routed cell (every round; "
            "bucket: nearest power of two of the requests in the engine)", "",
            "| concurrency | pool | bucket | samples | step ms (median) | other pool busy "
            "| ρ divided by (median) | folded ms (median) |", "|---|---|---|---|---|---|---|---|",
            *out]


def _plots(cells, systems, sweep, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for metric, name, label in (("output_tok_s", "throughput.png", "output tok/s"),
                                ("tpot_p99_ms", "tpot_p99.png", "TPOT p99 (ms)")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for s in systems:
            pts = [(c, median(cells[k][s], metric)) for c, k in sweep
                   if s in cells[k] and median(cells[k][s], metric) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=s)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (closed loop)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
    base = next((s for s in systems if s.startswith("vanilla")), None)
    if sweep and base in cells[sweep[0][1]]:
        row = cells[sweep[0][1]]  # lowest concurrency
        fig, ax = plt.subplots(figsize=(7, 4.5))
        others = [s for s in systems if s != base and s in row]
        width = 0.8 / max(len(others), 1)
        for i, s in enumerate(others):
            ys = [(_by_task(row[base], t) or 0) / (_by_task(row[s], t) or float("inf"))
                  for t in TASKS]
            ax.bar([j + i * width for j in range(len(TASKS))], ys, width, label=s)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks([j + width * (len(others) - 1) / 2 for j in range(len(TASKS))], TASKS)
        ax.set_ylabel(f"speedup over {base} (TPOT p50), concurrency {sweep[0][0]}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "speedup_by_task.png", dpi=110)
        plt.close(fig)


def _by_task(runs: list[dict], task: str) -> float | None:
    """Median over rounds of a task's TPOT p50 (ms)."""
    values = [r["tpot_p50_ms_by_task"][task] for r in runs
              if r["tpot_p50_ms_by_task"].get(task) is not None]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.report DIR`: rewrites DIR/report.md and the plots from DIR/results.json
    (a report made by an older version of this module, or of a run stopped between
    applications: `bench.run` writes results.json after each)."""
    import argparse
    import json
    p = argparse.ArgumentParser(prog="python -m bench.report", description=main.__doc__)
    p.add_argument("dir", type=Path, help="a bench.run results folder (holds results.json)")
    args = p.parse_args(argv)
    path = args.dir / "results.json"
    if not path.is_file():
        p.error(f"dir: {path} does not exist (pass a folder bench.run wrote)")
    write_report(json.loads(path.read_text()), args.dir)
    print(args.dir / "report.md")


if __name__ == "__main__":
    main()
