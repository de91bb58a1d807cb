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
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any

from unirag.errors import InputError
from unirag.reports.collect import RunSummary, summarize_run
from unirag.reports.compare import compare_runs
from unirag.reports.gallery import MediaStore, asset_text, build_gallery, esc
from unirag.reports.plots import plot_group
from unirag.reports.sampling import sampling_tables
from unirag.reports.tables import dataset_table, slug
from unirag.runs.atomic import atomic_write_text
from unirag.runs.rundir import OUTPUTS_FILE


def _unique(name: str, used: set[str]) -> str:
    """``name``, with ``_`` appended until no earlier file took it."""
    while name in used:
        name += "_"
    used.add(name)
    return name


def build_report(run_dirs: Sequence[str | Path], out_dir: str | Path, *, max_cards: int = 100,
                 queries: str | Path | None = None, pool: str | Path | None = None,
                 images_root: str | Path | None = None, gallery: bool = True, plots: bool = True,
                 baseline: str | Path | None = None, resamples: int = 1000, bootstrap_seed: int = 0,
                 ci_method: str = "percentile") -> dict[str, Any]:
    """Tables (``tables.md``, ``tables/*.csv``), plots and HTML galleries of evaluated runs in ``out_dir``;
    returns what was written (paths), notes and per-run card counts. ``queries``/``pool``/``images_root``
    override what each run's manifest records. With ``baseline`` (a run folder or row name) also the
    table of each run's paired differences from it (see :func:`unirag.compare_runs`)."""
    if not run_dirs:
        raise InputError("no run directories given")
    out = Path(out_dir)
    runs = [summarize_run(d) for d in run_dirs]
    comparison = (compare_runs(runs, baseline, resamples=resamples, seed=bootstrap_seed, method=ci_method)
                  if baseline is not None else None)
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
            path, n = build_gallery(r, media, max_cards=max_cards, queries=queries, pool=pool,
                                    images_root=images_root, page_name=f"{_unique(slug(r.name), used)}.html")
            galleries[r.run_dir] = os.path.relpath(path, out).replace(os.sep, "/")
            written["galleries"].append(path)
            written["cards"][r.name] = n
    groups: dict[tuple[str, str], list[RunSummary]] = defaultdict(list)  # one table per (task, dataset)
    for r in sorted(runs, key=RunSummary.sort_key):
        groups[(r.task, r.dataset)].append(r)
    made = [(dataset_table(task, dataset, group), plot_group(task, dataset, group, out / "plots") if plots else [])
            for (task, dataset), group in sorted(groups.items())]
    made += [(table, []) for table in sampling_tables(runs)]  # paper Table 7: pipelines on caption sample sets
    if comparison is not None:
        made.append((comparison.table(), []))
        written["comparison"] = comparison
    sections, used_names = [], set()
    for table, pngs in made:
        base = out / "tables" / _unique(table.name, used_names)
        atomic_write_text(Path(f"{base}.md"), table.markdown())
        atomic_write_text(Path(f"{base}.csv"), table.csv)
        written["tables"] += [Path(f"{base}.md"), Path(f"{base}.csv")]
        written["plots"] += pngs
        # the table's rows (labels not blanked); a runs table also names each row's generator, mode and
        # examples and links the run's gallery
        head, rows = list(table.head), [[esc(c) for c in row] for row in table.rows]
        if table.runs:
            head += ["generator", "mode", "examples", "run"]
            for row, r in zip(rows, table.runs, strict=True):
                link = galleries.get(r.run_dir)
                row += [esc(r.generator), esc(r.mode), esc(r.selection),
                        f'<a href="{esc(link)}">{esc(r.name)}</a>' if link else esc(r.name)]
        html = ('<table class="results"><tr><th></th>' + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"
                + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows) + "</table>")
        imgs = "".join(f'<img src="{esc(os.path.relpath(p, out))}" alt="{esc(p.stem)}">' for p in pngs)
        csv_link = f'CSV: <a href="{esc(os.path.relpath(base, out))}.csv">{esc(base.name)}.csv</a>'
        sections.append(f"<section><h2>{esc(table.title)}</h2>{html}<p class=\"muted\">"
                        f'{esc(" ".join(table.notes))} {csv_link}</p><div class="plots">{imgs}</div></section>')
    atomic_write_text(out / "tables.md", "\n".join(table.markdown() for table, _ in made))
    index = Template(asset_text("page.html")).substitute(
        title="unirag report", css="gallery.css", subtitle=esc(f"{len(runs)} run(s)"),
        nav="".join(f'<a href="{esc(link)}">{esc(r.name)}</a>' for r in runs
                    if (link := galleries.get(r.run_dir))),
        body='<div class="index">' + "\n".join(sections) + "</div>")
    atomic_write_text(out / "index.html", index)
    written["index"] = out / "index.html"
    return written

