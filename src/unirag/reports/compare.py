"""Each row of a report against a baseline run, on the queries both scored (``unirag report --baseline``).

For every metric with per-query rows (caption metrics - BLEU from its n-gram counts -, CLIP Score; not
FID or IS), each run minus the baseline with the statistics of :mod:`unirag.metrics.stats`; a cell
significant after Holm's correction across the table is marked with a dagger, as pyserini's
reproduction pages do. A run sharing no query with the baseline is refused: differences between
unpaired runs are not what this table claims.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.errors import InputError
from unirag.metrics.stats import (
    CONFIDENCE,
    DEFAULT_RESAMPLES,
    Comparison,
    metric_rows,
    paired_comparison,
    with_holm,
)
from unirag.reports.collect import RunSummary, summarize_run
from unirag.reports.tables import CAPTION_COLUMNS, IMAGE_COLUMNS, Table, number, slug
from unirag.runs.rundir import read_per_query

MARK = "†"


@dataclass
class RowComparison:
    """One run against the baseline: ``n`` shared queries, one :class:`Comparison` per metric."""

    run: RunSummary
    n: int
    metrics: dict[str, Comparison] = field(default_factory=dict)


@dataclass
class BaselineComparison:
    """What :func:`compare_runs` returns: the baseline, one row per other run, the metrics compared,
    those that could not be (metric -> why) and how the statistics were drawn."""

    baseline: RunSummary
    rows: list[RowComparison]
    metrics: list[str]
    not_compared: dict[str, str]
    settings: dict[str, Any]

    def table(self) -> Table:
        base, s = self.baseline, self.settings
        legend = (f"Run minus baseline on the queries both scored (n), {100 * s['confidence']:.0f}% paired "
                  f"bootstrap interval ({s['method']}, {s['resamples']} resamples, seed {s['seed']}). {MARK}: "
                  f"p < 0.05 in a paired randomization test after Holm's correction over the {s['n_tests']} "
                  "comparisons of this table. (~N q): roughly the queries needed to detect the difference "
                  "(power 0.8, alpha 0.05).")
        return Table(f"compare_{slug(base.task)}_{slug(base.dataset)}",
                     f"Differences from the baseline {base.label} (k={base.k}, {base.name}) — {base.dataset}",
                     ["k", "n", *self.metrics], [[r.run.label, r.run.k, r.n, *(comparison_cell(r.metrics.get(m))
                                                                             for m in self.metrics)] for r in self.rows],
                     self.csv(), [legend, *(f"Not compared: {why}" for why in self.not_compared.values())])

    def markdown(self) -> str:
        return self.table().markdown()

    def csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["row", "k", "run", "baseline", "metric", "n", "diff", "low", "high", "p", "p_holm",
                         "significant", "queries_needed"])
        for r in self.rows:
            for m, c in r.metrics.items():
                writer.writerow([r.run.label, r.run.k, r.run.name, self.baseline.name, m, c.n,
                                 f"{c.diff:.4f}", f"{c.low:.4f}", f"{c.high:.4f}", f"{c.p_value:.4g}",
                                 f"{c.p_holm:.4g}", int(c.significant),
                                 "" if c.n_needed is None else c.n_needed])
        return buf.getvalue()

    def as_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline.name, "settings": self.settings, "not_compared": self.not_compared,
                "rows": [{"run": r.run.name, "label": r.run.label, "k": r.run.k, "n": r.n,
                          "metrics": {m: c.as_dict() for m, c in r.metrics.items()}} for r in self.rows]}


def compare_runs(runs: Sequence[str | Path | RunSummary], baseline: str | Path, *,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = 0, method: str = "percentile"
                 ) -> BaselineComparison:
    """Compare each evaluated run with ``baseline`` (a run folder, or the directory name or row label of
    one of ``runs``) on the queries both scored: difference (run - baseline), paired bootstrap interval
    (``method`` "percentile" or "BCa", ``resamples`` seeded by ``seed``), paired randomization p-value,
    Holm's correction across the table, and queries needed where the difference is not significant.
    An :class:`unirag.errors.InputError` for unpaired runs. Needs the ``eval`` extra (scipy).
    """
    summaries = [r if isinstance(r, RunSummary) else summarize_run(r) for r in runs]
    # the baseline: a run folder (given or not among the runs), else a run's directory name, else a row label
    path = Path(baseline)
    base = next((r for r in summaries if path.exists() and r.run_dir.resolve() == path.resolve()), None)
    base = base or (summarize_run(path) if path.is_dir() else None)
    for key in ("name", "label") if base is None else ():
        found = [r for r in summaries if getattr(r, key) == str(baseline)]
        if len(found) > 1:
            raise InputError(f"--baseline {str(baseline)!r} names {len(found)} rows "
                             f"({', '.join(r.name for r in found)}): give the run folder")
        if found:
            base = found[0]
            break
    if base is None:
        raise InputError(f"--baseline {str(baseline)!r} is neither a run folder nor a row of this report "
                         f"(rows: {', '.join(r.name for r in summaries)})")
    base_records = read_per_query(base.run_dir)
    if not base_records:
        raise InputError("the baseline has no metrics_per_query.jsonl: evaluate it again", path=base.run_dir)
    others = [r for r in summaries if r.run_dir.resolve() != base.run_dir.resolve()]
    if not others:
        raise InputError("nothing to compare: give at least one run besides the baseline")
    metrics = [m for m in (IMAGE_COLUMNS if base.task == "image" else CAPTION_COLUMNS) if m in base.metrics]
    not_compared: dict[str, str] = {}
    rows: list[RowComparison] = []
    flat: list[tuple[RowComparison, Comparison]] = []
    for r in others:
        if (r.task, r.dataset) != (base.task, base.dataset):
            raise InputError(f"cannot compare {r.name} ({r.task}, {r.dataset}) with the baseline {base.name} "
                             f"({base.task}, {base.dataset}): unpaired runs (different query sets)")
        records = read_per_query(r.run_dir)
        shared = sorted(set(records) & set(base_records))
        if not shared:
            raise InputError(f"cannot compare {r.name} with the baseline {base.name}: they share no scored query "
                             f"(unpaired runs, different query sets)")
        rows.append(row := RowComparison(run=r, n=len(shared)))
        for m in metrics:
            if m not in r.metrics:
                continue
            mine, theirs = metric_rows(records, m, shared), metric_rows(base_records, m, shared)
            if mine is None or theirs is None:
                not_compared.setdefault(m, f"{m}: no per-query statistics in metrics_per_query.jsonl "
                                           "(a corpus figure, or runs evaluated before unirag wrote them)")
                continue
            if len(shared) < 2:
                not_compared.setdefault(m, f"{r.name}: a paired comparison needs at least 2 shared queries")
                continue
            flat.append((row, paired_comparison(mine[0], theirs[0], mine[1], metric=m, n_resamples=resamples,
                                                seed=seed, method=method)))
    for (row, _), c in zip(flat, with_holm([c for _, c in flat]), strict=True):
        row.metrics[c.metric] = c
    compared = [m for m in metrics if any(m in r.metrics for r in rows)]
    not_compared |= {m: f"{m}: no other run has it" for m in metrics
                     if m not in compared and m not in not_compared}
    settings = {"resamples": int(resamples), "seed": int(seed), "method": method, "confidence": CONFIDENCE,
                "test": "paired randomization (scipy.stats.permutation_test, permutation_type='samples')",
                "correction": "Holm", "n_tests": len(flat)}
    return BaselineComparison(baseline=base, rows=rows, metrics=compared, not_compared=not_compared,
                              settings=settings)


def comparison_cell(c: Comparison | None) -> str:
    """``+1.2† [0.4, 2.0]``; a non-significant difference also says about how many queries would detect it."""
    if c is None:
        return "-"
    text = f"{number(c.metric, c.diff, True)}{MARK if c.significant else ''} [{number(c.metric, c.low)}, " \
           f"{number(c.metric, c.high)}]"
    if not c.significant and c.n_needed is not None:
        text += " (no difference)" if c.n_needed < 0 else f" (~{c.n_needed} q)"
    return text
