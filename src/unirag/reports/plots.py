"""One PNG per main metric: the metric against k, one line per generator and example source.

Every few-shot line starts at its generator's zero-shot run (k = 0), as the paper reads its tables;
retrieval-only baselines are drawn as dashed horizontal lines. Error bars: each run's 95 % bootstrap
interval over queries, as ``unirag evaluate`` wrote it into metrics.json. matplotlib is imported lazily with
the Agg backend (no display needed).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from unirag.reports.collect import RunSummary

MAIN_METRICS = {"caption": ("BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE"), "image": ("FID", "CLIP Score", "IS")}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def error_bar(runs: Sequence[RunSummary], metric: str):
    """matplotlib's ``yerr`` (2 x n distances below/above each point) from the runs' 95 % intervals in
    metrics.json, or None when no run has one (a run without an interval gets a zero-length bar)."""
    cis = [(r.evaluation.get("intervals") or {}).get(metric) for r in runs]
    if not any(cis):
        return None
    return [[max(0.0, r.metrics[metric] - ci["low"]) if ci else 0.0 for r, ci in zip(runs, cis, strict=True)],
            [max(0.0, ci["high"] - r.metrics[metric]) if ci else 0.0 for r, ci in zip(runs, cis, strict=True)]]


def plot_metric(task: str, dataset: str, metric: str, runs: Sequence[RunSummary], out: Path) -> bool:
    """Write the plot; False (nothing written) when no run has the metric."""
    have = [r for r in runs if metric in r.metrics]
    if not have:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    zero = {r.generator: r for r in have if r.mode != "retrieval" and (r.k == 0 or r.mode == "zero-shot")}
    lines: dict[str, list[RunSummary]] = defaultdict(list)
    for r in have:
        if r.mode in ("rag", "random") and r.k > 0:
            lines[r.series].append(r)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for series, rs in sorted(lines.items()):
        rs = sorted(rs, key=lambda r: r.k)
        if rs[0].generator in zero:
            rs = [zero[rs[0].generator], *rs]
        ax.errorbar([r.k for r in rs], [r.metrics[metric] for r in rs], yerr=error_bar(rs, metric), marker="o",
                    capsize=3, label=series)
    for gen, r in sorted(zero.items()):
        if not any(s.generator == gen for ss in lines.values() for s in ss):
            ax.errorbar([0], [r.metrics[metric]], yerr=error_bar([r], metric), marker="s", linestyle="none",
                        capsize=3, label=f"{gen} (zero-shot)")
    for r in have:
        if r.mode == "retrieval":
            ax.axhline(r.metrics[metric], linestyle="--", linewidth=1, color="gray")
            ci = (r.evaluation.get("intervals") or {}).get(metric)
            if ci:  # its 95 % interval as a band
                ax.axhspan(ci["low"], ci["high"], color="gray", alpha=0.12, linewidth=0)
            ax.annotate(r.series, (0, r.metrics[metric]), fontsize=7, color="gray", va="bottom")
    ks = sorted({r.k for r in have})
    ax.set_xticks(ks)
    ax.set_xlabel("k (in-context examples)")
    ax.set_ylabel(metric + (" (lower is better)" if metric == "FID" else ""))
    ax.set_title(f"{metric} vs k — {dataset}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return True


def plot_group(task: str, dataset: str, runs: Sequence[RunSummary], out_dir: Path) -> list[Path]:
    written = []
    for metric in MAIN_METRICS.get(task, ()):
        path = out_dir / f"{slug(task)}_{slug(dataset)}_{slug(metric)}.png"
        if plot_metric(task, dataset, metric, runs, path):
            written.append(path)
    return written
