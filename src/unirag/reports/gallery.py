"""Static HTML gallery: one card per query with the query, the in-context examples of the prompt, the
output (or error), the references and the per-query scores. Images are copied in as small JPEG
thumbnails linked by relative paths, so the report folder is self-contained; all text is escaped.
"""

from __future__ import annotations

import functools
import hashlib
import html
import os
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from unirag.data.mbeir import read_queries
from unirag.data.records import Query, resolve_image
from unirag.metrics.references import positive_candidates
from unirag.reports.collect import RunSummary
from unirag.runs.rundir import read_per_query, read_run_dir

THUMB_SIZE = 384
#: Cards shown open; the others are one line each (query id, status, output) until clicked, so a
#: gallery of 100 queries stays a page of a few screens instead of tens of thousands of pixels.
OPEN_CARDS = 2


def asset_text(name: str) -> str:
    return resources.files("unirag.reports").joinpath("assets", name).read_text(encoding="utf-8")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


class MediaStore:
    """Thumbnails under ``<report>/media``; one file per source image however often it appears."""

    def __init__(self, report_dir: Path) -> None:
        self.dir = report_dir / "media"
        self.page_dir = report_dir / "gallery"  # where the pages that link the thumbnails are
        self.img_tag = functools.cache(self._img_tag)  # one thumbnail per source image

    def _img_tag(self, source: Path | None, alt: str) -> str:
        file = source.resolve() if source is not None else None
        target: Path | None = None
        if file is not None and file.is_file():
            from unirag.data.images import load_rgb

            digest = hashlib.sha1(f"{file}:{file.stat().st_mtime_ns}".encode()).hexdigest()[:16]
            target = self.dir / f"{digest}.jpg"
            if not target.exists():
                try:
                    im = load_rgb(file, draft=THUMB_SIZE)
                    im.thumbnail((THUMB_SIZE, THUMB_SIZE))
                    self.dir.mkdir(parents=True, exist_ok=True)
                    im.save(target, "JPEG", quality=85)
                except Exception:  # noqa: BLE001 - an unreadable image becomes a note on the card
                    target = None
        if target is None:
            return f'<p class="muted">image not available: {esc(source)}</p>'
        rel = os.path.relpath(target, self.page_dir).replace(os.sep, "/")
        return f'<img class="thumb" src="{esc(rel)}" alt="{esc(alt)}" loading="lazy">'


def render_card(task: str, qid: str, record: dict[str, Any], query: Query | None, refs: list, scores: dict,
                run_dir: Path, media: MediaStore, images_root: Path | None, pool_root: Path | None, *,
                open_card: bool = True) -> str:
    """One query's card: a ``<details>`` element whose one-line summary gives the query id, the
    status and the output (``open_card``: shown unfolded)."""
    ok = record.get("status", "ok") == "ok"
    if query is None:
        query_html = '<p class="muted">query not found in the queries file</p>'
    elif task == "caption" and query.img_path:
        query_html = media.img_tag(resolve_image(query.img_path, images_root), "query image")
    else:
        query_html = f'<div class="caption">{esc(query.txt)}</div>'
    if not ok:  # gist: the one-line summary of the folded card
        gist = record.get("error") or "failed"
        output = f'<div class="error">{esc(gist)}</div>'
    elif task == "image":
        gist = f"generated image · {query.txt if query is not None and query.txt else ''}"
        output = media.img_tag(resolve_image(record.get("image"), run_dir), "generated image")
    else:
        gist = record.get("caption") or ""
        output = f'<div class="caption">{esc(record.get("caption"))}</div>'
        scored = scores.get("caption_scored")
        if scored is not None and scored != (record.get("caption") or "").strip():
            output += f'<p class="muted">scored as: {esc(scored)}</p>'
    if task == "image":
        ref_html = "".join(media.img_tag(resolve_image(c.img_path, pool_root or images_root), "reference image")
                           for c in refs if c.img_path)
    else:
        ref_html = "<ul>" + "".join(f"<li>{esc(c.txt)}</li>" for c in refs if c.txt) + "</ul>"
    examples = record.get("examples") or []
    items = []
    for ex in examples if isinstance(examples, list) else []:
        ex = ex if isinstance(ex, dict) else {}
        img = media.img_tag(resolve_image(ex.get("img_path"), pool_root), "example image") if ex.get("img_path") else ""
        items.append(f'<li>{img}<div class="caption">{esc(ex.get("txt"))}</div></li>')
    rows = [(k, v) for k, v in scores.items() if isinstance(v, (int, float)) and k != "qid"]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v:.2f}</td></tr>" for k, v in rows)
    return Template(asset_text("card.html")).substitute(
        open=" open" if open_card else "", gist=esc(str(gist)[:200]),
        status_class="ok" if ok else "failed", anchor=esc(qid), qid=esc(qid), status="ok" if ok else "failed",
        query=query_html, n_examples=len(examples) if isinstance(examples, list) else 0,
        examples="<ol>" + "".join(items) + "</ol>" if examples else '<p class="muted">none (zero-shot)</p>',
        output=output, references=ref_html or '<p class="muted">none found</p>',
        scores=f"<table>{body}</table>" if rows
        else '<p class="muted">no per-query scores (run unirag evaluate first)</p>')


def build_gallery(run: RunSummary, media: MediaStore, *, max_cards: int = 100,
                  queries: Path | None = None, pool: Path | None = None, images_root: Path | None = None,
                  page_name: str | None = None) -> tuple[Path, int]:
    """Write ``<report>/gallery/<run>.html``; returns (path, number of cards)."""
    media.page_dir.mkdir(parents=True, exist_ok=True)
    outputs = read_run_dir(run.run_dir)
    per_query = read_per_query(run.run_dir)
    queries_path = Path(queries) if queries else run.recorded_path("queries")
    pool_path = Path(pool) if pool else run.recorded_path("pool")
    # caption runs: images_root = the query images, pool_images_root = the examples';
    # image runs: evaluate images records where the real (reference) images are
    root = Path(images_root) if images_root else run.recorded_path("images_root",
                                                                   evaluation_first=run.task == "image")
    pool_root = run.recorded_path("pool_images_root") or root
    shown = list(outputs.records.items())[:max_cards]
    by_qid: dict[str, Query] = {}
    refs: dict[str, list] = {}
    notes = []
    if queries_path is not None:
        by_qid = {q.qid: q for q in read_queries(queries_path)}
        if pool_path is not None:
            refs = positive_candidates([by_qid[q] for q, _ in shown if q in by_qid], pool_path)
        else:
            notes.append("pool file not found: references not shown")
    else:
        notes.append("queries file not found (pass --queries): query content not shown")
    cards = [render_card(run.task, qid, rec, by_qid.get(qid), refs.get(qid, []), per_query.get(qid, {}),
                         run.run_dir, media, root, pool_root, open_card=i < OPEN_CARDS)
             for i, (qid, rec) in enumerate(shown)]
    failed = sum(1 for _, r in shown if r.get("status", "ok") != "ok")
    subtitle = (f"{run.label} · k={run.k} · {run.dataset} · showing {len(cards)} of {len(outputs.records)} "
                f"queries ({failed} failed); click a card to unfold it" + ("; " + "; ".join(notes) if notes else ""))
    page = Template(asset_text("page.html")).substitute(
        title=esc(f"Gallery: {run.name}"), css="../gallery.css", subtitle=esc(subtitle),
        nav='<a href="../index.html">← report index</a>', body="\n".join(cards))
    path = media.page_dir / (page_name or f"{run.name}.html")
    path.write_text(page, encoding="utf-8")
    return path, len(cards)
