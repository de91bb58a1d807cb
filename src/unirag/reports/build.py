"""``unirag report``: tables (Markdown + CSV), plots (PNG) and galleries (HTML) from run directories.

Layout of the report folder (all paths inside it are relative, so it can be moved or zipped)::

    index.html              tables, plots and links to the galleries
    tables.md               every table, Markdown
    tables/<task>_<dataset>.csv / .md
    tables/image_sampling_<pipeline>.csv / .md   one pipeline over caption sample sets (paper Table 7)
    plots/<task>_<dataset>_<metric>.png
    gallery/<run>.html      one card per query
    media/*.jpg             thumbnails used by the galleries
    gallery.css
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any

from unirag.errors import InputError
from unirag.reports.collect import RunSummary, summarize_run
from unirag.reports.gallery import MediaStore, asset_text, build_gallery, esc
from unirag.reports.plots import plot_group, slug
from unirag.reports.sampling_table import (
    csv_sampling_table,
    legend,
    markdown_sampling_table,
    sampling_tables,
    set_labels,
)
from unirag.reports.tables import (
    LEAK_COLUMN,
    cell,
    csv_table,
    group_runs,
    has_leak_column,
    header,
    leak_cell,
    markdown_table,
    metric_columns,
)
from unirag.runs.atomic import atomic_write_text
from unirag.runs.rundir import OUTPUTS_FILE


def _unique(name: str, used: set[str]) -> str:
    """``name``, with ``_`` appended until no earlier file took it."""
    while name in used:
        name += "_"
    used.add(name)
    return name


def _html_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A results table: a blank corner, then ``head`` (escaped here); the cells are HTML already."""
    return ('<table class="results"><tr><th></th>' + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows) + "</table>")


def _runs_table(task: str, runs: Sequence[RunSummary], galleries: dict[Path, str],
                labels: Sequence[str] | None = None) -> str:
    """``labels`` replaces the first column (the sampling table shows the sample set there)."""
    cols, leak = metric_columns(task, runs), has_leak_column(runs)
    rows = []
    for i, r in enumerate(runs):
        link = galleries.get(r.run_dir)
        rows.append([esc(r.label if labels is None else labels[i]), r.k, *(esc(cell(r, c)) for c in cols),
                     *([esc(leak_cell(r))] if leak else []), esc(r.generator), esc(r.mode), esc(r.selection),
                     f'<a href="{esc(link)}">{esc(r.name)}</a>' if link else esc(r.name)])
    head = ["k", *map(header, cols), *([LEAK_COLUMN] if leak else []), "generator", "mode", "examples", "run"]
    return _html_table(head, rows)


def _write_table(out: Path, name: str, md: str, csv_text: str, written: dict[str, Any]) -> str:
    """tables/NAME.md and .csv; the HTML link to the CSV."""
    base = out / "tables" / name
    atomic_write_text(base.with_suffix(".md"), md)
    atomic_write_text(base.with_suffix(".csv"), csv_text)
    written["tables"] += [base.with_suffix(".md"), base.with_suffix(".csv")]
    return f'CSV: <a href="{esc(os.path.relpath(base, out))}.csv">{esc(base.name)}.csv</a>'


def build_report(run_dirs: Sequence[str | Path], out_dir: str | Path, *, max_cards: int = 100,
                 queries: str | Path | None = None, pool: str | Path | None = None,
                 images_root: str | Path | None = None, gallery: bool = True, plots: bool = True,
                 baseline: str | Path | None = None, resamples: int = 1000, bootstrap_seed: int = 0,
                 ci_method: str = "percentile") -> dict[str, Any]:
    """Tables (``tables.md``, ``tables/*.csv``), plots and HTML galleries of evaluated runs in ``out_dir``
    (what ``unirag report`` writes); returns what was written (paths), notes and per-run card counts.
    ``queries``/``pool``/``images_root`` override what each run's manifest records. With ``baseline``
    (a run folder or row name) also the table of each run's paired differences from it
    (``tables/compare_<task>_<dataset>``, see :func:`unirag.compare_runs`), refused for unpaired runs."""
    if not run_dirs:
        raise InputError("no run directories given")
    out = Path(out_dir)
    runs = [summarize_run(d) for d in run_dirs]
    comparison = None
    if baseline is not None:
        from unirag.reports.compare import compare_runs

        comparison = compare_runs(runs, baseline, resamples=resamples, seed=bootstrap_seed, method=ci_method)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gallery.css").write_text(asset_text("gallery.css"), encoding="utf-8")
    written: dict[str, Any] = {"tables": [], "plots": [], "galleries": [], "cards": {}, "notes": []}
    galleries: dict[Path, str] = {}
    if gallery:
        media = MediaStore(out)
        used: set[str] = set()
        for r in runs:
            if not (r.run_dir / OUTPUTS_FILE).is_file():  # metrics only (e.g. results copied without outputs)
                written["notes"].append(f"{r.run_dir}: no {OUTPUTS_FILE}, no gallery")
                continue
            path, n = build_gallery(r, out, media, max_cards=max_cards, queries=queries, pool=pool,
                                    images_root=images_root, page_name=f"{_unique(slug(r.name), used)}.html")
            galleries[r.run_dir] = os.path.relpath(path, out).replace(os.sep, "/")
            written["galleries"].append(path)
            written["cards"][r.name] = n
    sections, markdown = [], []
    for (task, dataset), group in group_runs(runs).items():
        markdown.append(markdown_table(task, dataset, group))
        name = f"{slug(task)}_{slug(dataset)}"
        csv_link = _write_table(out, name, markdown[-1], csv_table(task, group), written)
        pngs = plot_group(task, dataset, group, out / "plots") if plots else []
        written["plots"] += pngs
        kind = "Caption generation" if task == "caption" else "Image generation"
        imgs = "".join(f'<img src="{esc(os.path.relpath(p, out))}" alt="{esc(p.stem)}">' for p in pngs)
        sections.append(f"<section><h2>{esc(kind)} — {esc(dataset)}</h2>{_runs_table(task, group, galleries)}"
                        f'<p class="muted">{csv_link}</p><div class="plots">{imgs}</div></section>')
    used_names: set[str] = set()
    for table in sampling_tables(runs):  # paper Table 7: pipelines run on several caption sample sets
        markdown.append(markdown_sampling_table(table))
        name = _unique(f"image_sampling_{slug(table.pipeline)}", used_names)
        csv_link = _write_table(out, name, markdown[-1], csv_sampling_table(table), written)
        html = _runs_table("image", table.runs, galleries, labels=set_labels(table))
        title = f"Image generation — {table.pipeline} on caption sample sets"
        sections.append(f'<section><h2>{esc(title)}</h2>{html}<p class="muted">{esc(legend(table))} '
                        f"{csv_link}</p></section>")
    if comparison is not None:
        from unirag.reports.compare import comparison_cell

        base = comparison.baseline
        markdown.append(comparison.markdown())
        name = f"compare_{slug(base.task)}_{slug(base.dataset)}"
        _write_table(out, name, markdown[-1], comparison.csv(), written)
        written["comparison"] = comparison
        html = _html_table(["k", "n", *comparison.metrics],
                           [[esc(r.run.label), r.run.k, r.n, *(esc(comparison_cell(r.metrics.get(m)))
                                                               for m in comparison.metrics)]
                            for r in comparison.rows])
        sections.append(f"<section><h2>{esc(f'Differences from the baseline {base.label} (k={base.k})')}</h2>"
                        f'{html}<p class="muted">{esc(comparison.legend())} '
                        f"{esc(' '.join(comparison.not_compared.values()))}</p></section>")
    atomic_write_text(out / "tables.md", "\n".join(markdown))
    index = Template(asset_text("page.html")).substitute(
        title="unirag report", css="gallery.css", subtitle=esc(f"{len(runs)} run(s)"),
        nav="".join(f'<a href="{esc(link)}">{esc(r.name)}</a>' for r in runs
                    if (link := galleries.get(r.run_dir))),
        body='<div class="index">' + "\n".join(sections) + "</div>")
    atomic_write_text(out / "index.html", index)
    written["index"] = out / "index.html"
    return written

