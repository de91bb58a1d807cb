"""Plain-text metric tables for the terminal (no heavy imports: the CLI prints these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def metric_table(metrics: Mapping[str, float], skipped: Mapping[str, str] | None = None,
                 intervals: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """One metric per line: its value and, when ``intervals`` are given, its 95 % interval ('-' for a
    metric without one); skipped metrics show '-' and their reason is printed after."""
    names = list(metrics) + [m for m in (skipped or {}) if m not in metrics]
    width = max((len(n) for n in names), default=6)
    values = {n: "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
              for n in names for v in [metrics.get(n)]}
    if intervals is None:
        lines = [f"{'metric':<{width}}  value", f"{'-' * width}  ------"]
        return "\n".join(lines + [f"{n:<{width}}  {values[n]}" for n in names])
    lines = [f"{'metric':<{width}}  {'value':>8}  95% CI", f"{'-' * width}  {'-' * 8}  ------"]
    for n in names:
        ci = intervals.get(n) if n in metrics else None
        interval = f"[{ci['low']:.2f}, {ci['high']:.2f}]" if ci else "-"
        lines.append(f"{n:<{width}}  {values[n]:>8}  {interval}")
    return "\n".join(lines)


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    counts = [f"{result.get('n_scored', 0)} scored"]
    for key, label in (("n_failed", "failed (excluded)"), ("n_missing", "without output yet"),
                       ("n_no_references", "without references"), ("n_no_real_image", "without a real image")):
        if result.get(key):
            counts.append(f"{result[key]} {label}")
    lines = [f"queries: {result.get('n_queries', 0)}; " + ", ".join(counts)]
    if b := result.get("bootstrap"):  # how the intervals were drawn
        whole = [name.upper() for name in ("fid", "is") if name in b]  # figures recomputed per resample
        extra = (f"; {' and '.join(whole)}: {b[whole[0].lower()]['n_resamples']} resamples, their spread "
                 "centred on the figure" if whole else "")
        lines.append(f"{100 * b['confidence']:.0f}% CI: {b['method']} bootstrap over queries, "
                     f"{b['n_resamples']} resamples, seed {b['seed']}{extra} (see docs/comparing-runs.md for "
                     "how each metric is resampled)")
    lines += list(dict.fromkeys((result.get("skipped_metrics") or {}).values()))
    return lines
