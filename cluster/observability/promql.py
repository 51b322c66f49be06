"""PromQL builders shared by the dashboard's panels and the alert rules."""

from __future__ import annotations

RATE = "$__rate_interval"  # Grafana's rate window; rules pass a fixed one


def rate(metric: str, selector: str = "", window: str = RATE) -> str:
    """`rate(metric{selector}[window])`."""
    return f"rate({metric}{{{selector}}}[{window}])" if selector else f"rate({metric}[{window}])"


def ratio_by(num: str, den: str, by: str = "pool", window: str = RATE) -> str:
    """Σ rate(num) / Σ rate(den) per `by`, without the groups whose denominator is 0 (no NaN)."""
    return (f"sum by ({by}) ({rate(num, window=window)}) / "
            f"(sum by ({by}) ({rate(den, window=window)}) > 0)")


def mean(histogram: str, selector: str, window: str = RATE) -> str:
    """Mean observation of a histogram over the window: Σ rate(_sum) / Σ rate(_count)."""
    return (f"(sum({rate(histogram + '_sum', selector, window)}) / "
            f"sum({rate(histogram + '_count', selector, window)}))")


def quantiles(histogram: str, by: str = "deployment", qs: tuple[float, ...] = (0.5, 0.99),
              window: str = RATE) -> list[tuple[str, str]]:
    """[(histogram_quantile expression per `by`, its legend)] for each quantile in `qs`."""
    return [(f"histogram_quantile({q}, sum by ({by}, le) "
             f"({rate(histogram + '_bucket', window=window)}))", f"{{{{{by}}}}} p{round(q * 100)}")
            for q in qs]
