"""Paper-style result tables (Tables 3-7): rows = retriever x generator x k, columns = metrics.

One table per (task, dataset). Caption tables: BLEU-1..4, CIDEr, ROUGE-L, SPICE, METEOR (a column
appears only when at least one run has it). Image tables: FID, CLIP Score, IS with its SD in
parentheses, as in the paper. Written as Markdown (for reading) and CSV (for spreadsheets, with
the run directory name so every number can be traced back).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable, Sequence

from unirag.reports.collect import RunSummary

# The paper's Table 3/4 order (BLEU, CIDEr, ROUGE, SPICE); METEOR, not in the paper, last.
CAPTION_COLUMNS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "CIDEr", "ROUGE-L", "SPICE", "METEOR")
IMAGE_COLUMNS = ("FID", "CLIP Score", "IS")
LOWER_IS_BETTER = {"FID"}


def group_runs(runs: Iterable[RunSummary]) -> dict[tuple[str, str], list[RunSummary]]:
    groups: dict[tuple[str, str], list[RunSummary]] = defaultdict(list)
    for r in runs:
        groups[(r.task, r.dataset)].append(r)
    return {key: sorted(rs, key=RunSummary.sort_key) for key, rs in sorted(groups.items())}


def metric_columns(task: str, runs: Sequence[RunSummary]) -> list[str]:
    if task == "image":
        return [c for c in IMAGE_COLUMNS if any(c in r.metrics for r in runs)]
    return [m for m in CAPTION_COLUMNS if any(m in r.metrics for r in runs)]


def cell(run: RunSummary, column: str) -> str:
    value = run.metrics.get(column)
    if value is None:
        return "-"
    if column == "IS" and run.metrics.get("IS SD") is not None:
        return f"{value:.2f} ({run.metrics['IS SD']:.2f})"
    return f"{value:.2f}" if column in ("FID", "CLIP Score") else f"{value:.1f}"


def header(column: str) -> str:
    if column in LOWER_IS_BETTER:
        return f"{column} ↓"
    if column == "IS":
        return "IS ↑ (SD)"
    return f"{column} ↑" if column == "CLIP Score" else column


#: Column of the share of queries whose examples showed a near-duplicate of the query (leakage).
LEAK_COLUMN = "Leak rate"


def has_leak_column(runs: Sequence[RunSummary]) -> bool:
    return any(r.leak_rate is not None for r in runs)


def leak_cell(run: RunSummary) -> str:
    return "-" if run.leak_rate is None else f"{100 * run.leak_rate:.1f}%"


def markdown_table(task: str, dataset: str, runs: Sequence[RunSummary]) -> str:
    cols = metric_columns(task, runs)
    leak = has_leak_column(runs)
    kind = "Caption generation" if task == "caption" else "Image generation"
    lines = [f"### {kind} — {dataset}", "", "| | k | " + " | ".join(header(c) for c in cols)
             + (f" | {LEAK_COLUMN}" if leak else "") + " |",
             "|---|---:|" + "---:|" * (len(cols) + leak)]
    previous = None
    for r in runs:
        label = r.label if r.label != previous else ""
        previous = r.label
        lines.append(f"| {label} | {r.k} | " + " | ".join(cell(r, c) for c in cols)
                     + (f" | {leak_cell(r)}" if leak else "") + " |")
    skipped = sorted({m for r in runs for m in r.skipped if m not in cols})
    if skipped:
        lines += ["", "Not computed: " + ", ".join(skipped) + " (see each run's metrics.json for why)."]
    return "\n".join(lines) + "\n"


def csv_metric_columns(task: str, runs: Sequence[RunSummary]) -> list[str]:
    """The metric columns of a CSV table: as in Markdown, with the IS SD as a column of its own."""
    cols = metric_columns(task, runs)
    return cols + ["IS SD"] if task == "image" and "IS" in cols else cols


CSV_RUN_FIELDS = ("row", "retriever", "generator", "mode", "k")
CSV_TRACE_FIELDS = ("leak_rate", "n_scored", "n_failed", "run")


def csv_run_values(r: RunSummary, cols: Sequence[str]) -> list:
    """One run's CSV cells: who generated it, its metrics (4 decimals), its leak rate and where they came from."""
    return [r.label, r.retriever or "", r.generator, r.mode, r.k,
            *[("" if r.metrics.get(c) is None else f"{r.metrics[c]:.4f}") for c in cols],
            "" if r.leak_rate is None else f"{r.leak_rate:.4f}",
            r.evaluation.get("n_scored", ""), r.evaluation.get("n_failed", ""), r.name]


def csv_table(task: str, runs: Sequence[RunSummary]) -> str:
    cols = csv_metric_columns(task, runs)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*CSV_RUN_FIELDS, *cols, *CSV_TRACE_FIELDS])
    for r in runs:
        writer.writerow(csv_run_values(r, cols))
    return buf.getvalue()
