"""Paper-style result tables (Tables 3-7): rows = retriever x generator x k, columns = metrics.

A metric column appears when a run has it (IS with its SD in parentheses, as in the paper); a run made
by a reproduction grid carries the paper's figures (``paper.json``), and each such metric gets two more
columns, ``<metric> paper`` and ``<metric> Δ``. The CSV names each row's run directory, so every
number traces back.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from unirag.reports.collect import RunSummary

# The paper's Table 3/4 order (BLEU, CIDEr, ROUGE, SPICE); METEOR, not in the paper, last.
CAPTION_COLUMNS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "CIDEr", "ROUGE-L", "SPICE", "METEOR")
IMAGE_COLUMNS = ("FID", "CLIP Score", "IS")
#: A value column's header where it is not the metric's name: which way is better, IS with its SD.
HEADERS = {"FID": "FID ↓", "CLIP Score": "CLIP Score ↑", "IS": "IS ↑ (SD)"}


#: The kinds of column a metric has: its value, and the paper's figure and the difference from it, with
#: what the CSV header appends to the metric's name.
KIND_SUFFIX = {"value": "", "paper": " paper", "delta": " Δ"}


def column_value(run: RunSummary, column: tuple[str, str]) -> float | None:
    """The number a column shows for a run: the measured metric, the paper's figure, or their difference."""
    metric, kind = column
    if kind == "delta":
        measured, paper = run.metrics.get(metric), run.paper.get(metric)
        return measured - paper if measured is not None and paper is not None else None
    return (run.paper if kind == "paper" else run.metrics).get(metric)


def number(metric: str, value: float, signed: bool = False) -> str:
    """A metric's value as the tables show it: two decimals for image metrics, one for caption metrics."""
    spec = ".2f" if metric in ("FID", "CLIP Score", "IS", "IS SD") else ".1f"
    return format(value, ("+" if signed else "") + spec)


def cell(run: RunSummary, column: tuple[str, str]) -> str:
    metric, kind = column
    value = column_value(run, column)
    if value is None:
        return "-"
    source = run.paper if kind == "paper" else run.metrics
    sd = source.get("IS SD") if metric == "IS" and kind != "delta" else None
    return f"{value:.2f} ({sd:.2f})" if sd is not None else number(metric, value, signed=kind == "delta")


def header(column: tuple[str, str]) -> str:
    metric, kind = column
    if kind != "value":
        return f"{metric} (paper)" if kind == "paper" else "Δ"
    return HEADERS.get(metric, metric)


#: Column of the share of queries whose examples showed a near-duplicate of the query (leakage).
LEAK_COLUMN = "Leak rate"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


@dataclass
class Table:
    """One table of a report, whichever kind: written as ``tables/<name>.md`` and ``.csv``, shown in
    ``index.html`` (where a runs table also names each row's generator and links its gallery)."""

    name: str
    title: str
    head: list[str]  # the column headers after the row-label column
    rows: list[list[Any]]  # the row label, then one cell per header
    csv: str
    notes: list[str] = field(default_factory=list)
    runs: list[RunSummary] = field(default_factory=list)  # the run of each row (runs tables)
    blank_repeats: bool = False  # Markdown: a row label equal to the one above is left blank

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| | " + " | ".join(self.head) + " |", "|---|" + "---:|" * len(self.head)]
        for (label, *cells), previous in zip(self.rows, [None, *(row[0] for row in self.rows)], strict=False):
            shown = "" if self.blank_repeats and label == previous else label
            lines.append("| " + " | ".join(map(str, [shown, *cells])) + " |")
        return "\n".join(lines + (["", *self.notes] if self.notes else [])) + "\n"


def runs_table(task: str, runs: Sequence[RunSummary], name: str, title: str, *, labels: Sequence[str] | None = None,
               notes: Sequence[str] = (), lead: Sequence[str] = (), leads: Sequence[Sequence[str]] | None = None
               ) -> Table:
    """One row per run: its label (or ``labels``), k, the metric columns and the leak rate when a run has one.
    Its CSV has one row per run too: who generated it, its metrics (4 decimals; the IS SD a column of its
    own), its leak rate and its run; ``lead`` names columns put first, ``leads`` their values per run."""
    # (metric, kind) of each column: each metric some run has, then its paper and Δ columns when a run
    # carries the paper's figure
    cols: list[tuple[str, str]] = []
    for c in IMAGE_COLUMNS if task == "image" else CAPTION_COLUMNS:
        if any(c in r.metrics for r in runs):
            cols += [(c, "value"), *([(c, "paper"), (c, "delta")] if any(c in r.paper for r in runs) else [])]
    leak = any(r.leak_rate is not None for r in runs)
    leak_cells = [["-" if r.leak_rate is None else f"{100 * r.leak_rate:.1f}%"] if leak else [] for r in runs]
    csv_cols = cols + [("IS SD", "value")] if task == "image" and ("IS", "value") in cols else cols
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*lead, "row", "retriever", "generator", "mode", "k", "selection",
                     *(metric + KIND_SUFFIX[kind] for metric, kind in csv_cols),
                     "leak_rate", "n_scored", "n_failed", "run"])
    for i, r in enumerate(runs):
        writer.writerow([*(leads[i] if leads else ()), r.label, r.retriever or "", r.generator, r.mode, r.k,
                         r.selection, *[("" if column_value(r, c) is None else f"{column_value(r, c):.4f}")
                                        for c in csv_cols],
                         "" if r.leak_rate is None else f"{r.leak_rate:.4f}",
                         r.evaluation.get("n_scored", ""), r.evaluation.get("n_failed", ""), r.name])
    return Table(name, title, ["k", *map(header, cols), *([LEAK_COLUMN] if leak else [])],
                 [[r.label if labels is None else labels[i], r.k, *(cell(r, c) for c in cols), *leak_cells[i]]
                  for i, r in enumerate(runs)], buf.getvalue(), list(notes), list(runs), blank_repeats=labels is None)


def dataset_table(task: str, dataset: str, runs: Sequence[RunSummary]) -> Table:
    """The paper-style table of one (task, dataset)."""
    kind = "Caption generation" if task == "caption" else "Image generation"
    skipped = sorted({m for r in runs for m in r.skipped if not any(m in x.metrics for x in runs)})
    notes = ["Not computed: " + ", ".join(skipped) + " (see each run's metrics.json for why)."] if skipped else []
    return runs_table(task, runs, f"{slug(task)}_{slug(dataset)}", f"{kind} — {dataset}", notes=notes)
