"""Plain-text metric tables for the terminal (no heavy imports: the CLI prints these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def format_value(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def interval_text(interval: Mapping[str, float] | None, digits: int = 2) -> str:
    """``[low, high]`` of an interval from metrics.json, or '-'."""
    if not interval:
        return "-"
    return f"[{interval['low']:.{digits}f}, {interval['high']:.{digits}f}]"


def bootstrap_line(result: Mapping[str, Any]) -> str | None:
    """How the intervals were drawn (None when the evaluation computed none)."""
    b = result.get("bootstrap")
    if not b:
        return None
    whole = [name.upper() for name in ("fid", "is") if name in b]  # figures recomputed per resample
    extra = (f"; {' and '.join(whole)}: {b[whole[0].lower()]['n_resamples']} resamples, their spread centred on "
             "the figure" if whole else "")
    return (f"{100 * b['confidence']:.0f}% CI: {b['method']} bootstrap over queries, {b['n_resamples']} resamples, "
            f"seed {b['seed']}{extra} (see docs/comparing-runs.md for how each metric is resampled)")


def metric_table(metrics: Mapping[str, float], skipped: Mapping[str, str] | None = None,
                 intervals: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """One metric per line: its value and, when ``intervals`` are given, its 95 % interval ('-' for a
    metric without one); skipped metrics show '-' and their reason is printed after."""
    names = list(metrics) + [m for m in (skipped or {}) if m not in metrics]
    width = max((len(n) for n in names), default=6)
    if intervals is None:
        lines = [f"{'metric':<{width}}  value", f"{'-' * width}  ------"]
        lines += [f"{n:<{width}}  {format_value(metrics.get(n))}" for n in names]
        return "\n".join(lines)
    lines = [f"{'metric':<{width}}  {'value':>8}  95% CI", f"{'-' * width}  {'-' * 8}  ------"]
    lines += [f"{n:<{width}}  {format_value(metrics.get(n)):>8}  "
              f"{interval_text(intervals.get(n)) if n in metrics else '-'}" for n in names]
    return "\n".join(lines)


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    counts = [f"{result.get('n_scored', 0)} scored"]
    for key, label in (("n_failed", "failed (excluded)"), ("n_missing", "without output yet"),
                       ("n_no_references", "without references"), ("n_no_real_image", "without a real image")):
        if result.get(key):
            counts.append(f"{result[key]} {label}")
    lines = [f"queries: {result.get('n_queries', 0)}; " + ", ".join(counts)]
    if (line := bootstrap_line(result)) is not None:
        lines.append(line)
    lines += list(dict.fromkeys((result.get("skipped_metrics") or {}).values()))
    return lines
