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


def metric_table(metrics: Mapping[str, float], skipped: Mapping[str, str] | None = None) -> str:
    """Two columns, one metric per line; skipped metrics show '-' and their reason is printed after."""
    names = list(metrics) + [m for m in (skipped or {}) if m not in metrics]
    width = max((len(n) for n in names), default=6)
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  ------"]
    lines += [f"{n:<{width}}  {format_value(metrics.get(n))}" for n in names]
    return "\n".join(lines)


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    counts = [f"{result.get('n_scored', 0)} scored"]
    for key, label in (("n_failed", "failed (excluded)"), ("n_missing", "without output yet"),
                       ("n_no_references", "without references"), ("n_no_real_image", "without a real image")):
        if result.get(key):
            counts.append(f"{result[key]} {label}")
    lines = [f"queries: {result.get('n_queries', 0)}; " + ", ".join(counts)]
    lines += list(dict.fromkeys((result.get("skipped_metrics") or {}).values()))
    return lines
