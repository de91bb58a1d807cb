"""One PNG per main metric: the metric against k, one line per generator and example source.

Every few-shot line starts at its generator's zero-shot run (k = 0), as the paper reads its tables;
retrieval-only baselines are horizontal lines with their 95 % interval as a band; error bars are each
run's 95 % interval from metrics.json. Labels are in the legend beside the axes, never over the data;
flat or overlapping lines get a note under the plot saying so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from unirag.reports.collect import RunSummary
from unirag.reports.tables import slug

MAIN_METRICS = {"caption": ("BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE"), "image": ("FID", "CLIP Score", "IS")}


def error_bar(runs: Sequence[RunSummary], metric: str):
    """matplotlib's ``yerr`` (2 x n distances below/above each point) from the runs' 95 % intervals in
    metrics.json, or None when no run has one (a run without an interval gets a zero-length bar)."""
    cis = [(r.evaluation.get("intervals") or {}).get(metric) for r in runs]
    if not any(cis):
        return None
    return [[max(0.0, r.metrics[metric] - ci["low"]) if ci else 0.0 for r, ci in zip(runs, cis, strict=True)],
            [max(0.0, ci["high"] - r.metrics[metric]) if ci else 0.0 for r, ci in zip(runs, cis, strict=True)]]


def metric_figure(dataset: str, metric: str, runs: Sequence[RunSummary]):
    """``(figure, notes)`` of one metric against k (None when no run has it); ``notes``: why lines look
    flat."""
    have = [r for r in runs if metric in r.metrics]
    if not have:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    zero = {r.generator: r for r in have if r.mode != "retrieval" and (r.k == 0 or r.mode == "zero-shot")}
    lines: dict[str, list[RunSummary]] = defaultdict(list)
    for r in have:
        if r.mode in ("rag", "random") and r.k > 0:
            lines[r.series].append(r)
    points: dict[str, list[tuple[int | str, float]]] = {}
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for series, rs in sorted(lines.items()):
        rs = sorted(rs, key=lambda r: r.k)
        if rs[0].generator in zero:
            rs = [zero[rs[0].generator], *rs]
        points[series] = [(r.k, r.metrics[metric]) for r in rs]
        ax.errorbar(*zip(*points[series], strict=True), yerr=error_bar(rs, metric), marker="o", capsize=3, label=series)
    for gen, r in sorted(zero.items()):
        if not any(s.generator == gen for ss in lines.values() for s in ss):
            ax.errorbar([0], [r.metrics[metric]], yerr=error_bar([r], metric), marker="s", linestyle="none",
                        capsize=3, label=f"{gen} (zero-shot)")
    styles = ("--", ":", "-.", (0, (5, 1)), (0, (1, 3)))
    for i, r in enumerate(sorted((r for r in have if r.mode == "retrieval"), key=lambda r: r.series)):
        color = f"C{7 + i % 3}"
        ax.axhline(r.metrics[metric], linestyle=styles[i % len(styles)], linewidth=1.2, color=color,
                   label=f"{r.series}: {r.metrics[metric]:.2f}")
        ci = (r.evaluation.get("intervals") or {}).get(metric)
        if ci:  # its 95 % interval as a band
            ax.axhspan(ci["low"], ci["high"], color=color, alpha=0.12, linewidth=0)
        points[r.series] = [("every k", r.metrics[metric])]  # a horizontal line: the same at every k
    ks = sorted({r.k for r in have})
    ax.set_xticks(ks)
    ax.set_xlabel("k (in-context examples)")
    ax.set_ylabel(metric + (" (lower is better)" if metric == "FID" else ""))
    ax.set_title(f"{metric} vs k — {dataset}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    # why a plot shows flat lines: each series with more than one point that scores the same at every k,
    # and the lines that lie on top of each other (same values)
    notes = []
    for series, line in sorted(points.items()):
        if len(line) > 1 and len({round(v, 6) for _, v in line}) == 1:
            notes.append(f"flat: {series} scores {metric} {line[0][1]:.2f} at every k "
                         f"({', '.join(str(k) for k, _ in line)}): its output did not change with k")
    by_values: dict[tuple, list[str]] = defaultdict(list)
    for series, line in points.items():
        by_values[tuple((k, round(v, 6)) for k, v in line)].append(series)
    notes += [f"same values, drawn on top of each other: {', '.join(sorted(same))}"
              for same in by_values.values() if len(same) > 1]
    if notes:
        import textwrap

        text = "\n".join(textwrap.fill(n, 90) for n in notes)
        ax.text(0.0, -0.18, text, transform=ax.transAxes, fontsize=7, va="top", ha="left", color="#444")
    return fig, notes


def plot_group(task: str, dataset: str, runs: Sequence[RunSummary], out_dir: Path) -> list[Path]:
    """One PNG per main metric that some run has; the paths written."""
    written = []
    for metric in MAIN_METRICS.get(task, ()):
        made = metric_figure(dataset, metric, runs)
        if made is None:
            continue
        import matplotlib.pyplot as plt

        path = out_dir / f"{slug(task)}_{slug(dataset)}_{slug(metric)}.png"
        out_dir.mkdir(parents=True, exist_ok=True)
        made[0].savefig(path, bbox_inches="tight")
        plt.close(made[0])
        written.append(path)
    return written
