"""The autoscaling simulator's target (bench/autoscale_sim.py), met or missed against a baseline:
≥ `TARGET_SAVING` fewer accelerator-hours at ≥ `TARGET_ATTAINMENT` SLO attainment, or a higher
attainment at the same hours."""

from __future__ import annotations

from itertools import pairwise

TARGET_SAVING = 0.10
TARGET_ATTAINMENT = 0.99


def cheapest_at(runs: list[dict], slo: float) -> dict | None:
    """The run with the fewest accelerator-hours among those reaching attainment `slo`."""
    ok = [r for r in runs if r["slo"] >= slo]
    return min(ok, key=lambda r: r["accelerator_hours"]) if ok else None


def verdict(ours: list[dict], theirs: list[dict]) -> str:
    """The simulator's target against one baseline (each side: its runs at several settings,
    its default first): ≥ 10 % fewer accelerator-hours at ≥ 99 % SLO attainment (each side's
    cheapest run that reaches it; a baseline that never does is beaten by any of ours that does),
    or a higher attainment at the same hours (theirs interpolated between their runs, at the
    hours of our default run)."""
    mine, best = cheapest_at(ours, TARGET_ATTAINMENT), cheapest_at(theirs, TARGET_ATTAINMENT)
    if mine is None:
        fewer, at_target = False, f"ours never reaches {100 * TARGET_ATTAINMENT:g}%"
    elif best is None:
        fewer = True
        at_target = (f"ours {mine['accelerator_hours']:.1f} h at {100 * mine['slo']:.2f}%, "
                     f"theirs never reaches {100 * TARGET_ATTAINMENT:g}%")
    else:
        saving = 1 - mine["accelerator_hours"] / best["accelerator_hours"]
        fewer = saving >= TARGET_SAVING
        at_target = (f"at >= {100 * TARGET_ATTAINMENT:g}%: ours {mine['accelerator_hours']:.1f} h, "
                     f"theirs {best['accelerator_hours']:.1f} h ({100 * saving:.1f}% fewer)")
    h, slo = ours[0]["accelerator_hours"], ours[0]["slo"]
    pts = sorted((r["accelerator_hours"], r["slo"]) for r in theirs)
    if pts[0][0] <= h <= pts[-1][0]:
        (h0, s0), (h1, s1) = next((a, b) for a, b in pairwise(pts) if a[0] <= h <= b[0])
        same = s0 + (s1 - s0) * (h - h0) / (h1 - h0) if h1 > h0 else max(s0, s1)
        at_same = f"theirs at {h:.1f} h interpolated {100 * same:.2f}%, ours {100 * slo:.2f}%"
        higher = slo > same
    else:
        at_same = f"{h:.1f} h outside their {pts[0][0]:.1f}-{pts[-1][0]:.1f} h"
        higher = h < pts[0][0] and slo > pts[0][1]  # fewer hours and higher: dominates
    return (f"{at_target}: {'met' if fewer else 'missed'}; same hours: {at_same}: "
            f"{'met' if higher else 'missed'}")
