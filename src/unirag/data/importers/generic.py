"""Import a JSONL or CSV list of image paths with captions into M-BEIR files.

Each row names an image (path relative to the images root) and one or more captions: a list or a
single string in JSONL; in CSV one caption per cell, optionally several joined by a separator. Rows
that name the same image are merged, so a one-caption-per-row file (Flickr30k style) works too.
Other fields/columns of the row are kept in the ``src_content`` of the image candidate and of each of its
captions (so ``--filter gender=Men`` finds captions too).

Ids (see ``writer.py``): without ``id_field`` an image's source id is its 0-based order of first
appearance in the file; caption keys are ``<source_id>.<k>`` (k = 0-based caption index).
"""

from __future__ import annotations

import contextlib
import csv
import inspect
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unirag.data.importers.writer import ImportSummary, SourceItem, write_dataset
from unirag.data.jsonl import iter_json_lines
from unirag.data.text import iter_text_lines
from unirag.errors import InputError, existing_path

DEFAULT_IMAGE_FIELD = "image"
DEFAULT_CAPTION_FIELDS = ("caption", "captions")
_EXTRA = "\0extra"  # csv.DictReader key for cells beyond the header


def _iter_csv_rows(path: Path, delimiter: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with contextlib.closing(iter_text_lines(path)) as lines:
        reader = csv.DictReader((line for _, line in lines), delimiter=delimiter, restkey=_EXTRA)
        if not reader.fieldnames:
            raise InputError("empty CSV file (a header row is required)", path=path, line=1)
        start = 2
        try:
            for row in reader:
                lineno = start
                start = reader.line_num + 1
                if _EXTRA in row:
                    raise InputError(
                        f"row has {len(reader.fieldnames) + len(row[_EXTRA])} columns, "
                        f"the header has {len(reader.fieldnames)}",
                        path=path,
                        line=lineno,
                    )
                missing = [k for k, v in row.items() if v is None]
                if missing:
                    raise InputError(
                        f"row has fewer columns than the header (no value for {missing[0]!r})",
                        path=path,
                        line=lineno,
                        field=missing[0],
                    )
                if not any((v or "").strip() for v in row.values()):
                    continue
                yield lineno, row
        except csv.Error as e:
            raise InputError(f"malformed CSV ({e})", path=path, line=reader.line_num) from None


def source_id(obj: dict, key: str, path: Path, field: str, line: int | None = None, why: str | None = None) -> str:
    """``obj[key]`` as a source id (an integer or a non-empty string, stripped), else an :class:`InputError`
    naming ``field``: ``why``, or by default "missing field" / the value that is not an id."""
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | str) or (isinstance(v, str) and not v.strip()):
        raise InputError(why or ("missing field" if v is None else f"expected an integer or string id, got {v!r}"),
                         path=path, line=line, field=field)
    return str(v).strip()


def read_items(
    path: str | Path,
    *,
    image_field: str = DEFAULT_IMAGE_FIELD,
    caption_field: str | None = None,
    id_field: str | None = None,
    caption_sep: str | None = None,
    fmt: str | None = None,
    delimiter: str | None = None,
    limit: int | None = None,
) -> list[SourceItem]:
    """Parse rows into one :class:`SourceItem` per distinct image (rows of the same image are merged)."""
    path = existing_path(path)
    fmt = fmt or ("csv" if path.suffix.lower() in (".csv", ".tsv") else "jsonl")
    if fmt == "csv":
        rows = _iter_csv_rows(path, delimiter or ("\t" if path.suffix.lower() == ".tsv" else ","))
    elif fmt == "jsonl":
        rows = iter_json_lines(path)
    else:
        raise InputError(f"unknown input format {fmt!r}; expected jsonl or csv", path=path)

    items: dict[str, SourceItem] = {}
    for lineno, row in rows:
        where = f"{path}:{lineno}"
        img = row.get(image_field)
        if not isinstance(img, str) or not img.strip():
            why = "missing field" if img is None else "expected a non-empty image path"
            raise InputError(why, path=path, line=lineno, field=image_field)
        img = img.strip()
        fld = caption_field or next(
            (c for c in DEFAULT_CAPTION_FIELDS if c in row), DEFAULT_CAPTION_FIELDS[0]
        )
        value = row.get(fld)
        if value is None:
            raise InputError("missing field", path=path, line=lineno, field=fld)
        if isinstance(value, str):
            value = value.split(caption_sep) if caption_sep else [value]
        elif not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(
                f"expected a string or a list of strings, got {type(value).__name__}",
                path=path,
                line=lineno,
                field=fld,
            )
        caps = [p.strip() for p in value]
        if not caps or any(not c for c in caps):
            raise InputError("empty caption", path=path, line=lineno, field=fld)
        key = img if id_field is None else source_id(row, id_field, path, id_field, lineno,
                                                     "missing or invalid image id (string or integer)")
        item = items.get(key)
        if item is None:
            if limit is not None and len(items) >= limit:
                continue
            sid = key if id_field is not None else str(len(items))
            meta = {k: v for k, v in row.items() if k not in (image_field, fld, id_field, "source_id")}
            item = items[key] = SourceItem(source_id=sid, img_path=img, captions=[], meta=meta, origin=where)
        elif item.img_path != img:
            raise InputError(
                f"image id {key!r} was given for {item.img_path!r} at {item.origin}, here for {img!r}",
                path=path,
                line=lineno,
                field=id_field,
            )
        item.captions += [(f"{item.source_id}.{k}", c) for k, c in enumerate(caps, start=len(item.captions))]
    return list(items.values())


def import_generic(
    input_path: str | Path,
    images_root: str | Path,
    out_dir: str | Path,
    *,
    name: str | None = None,
    **options: Any,
) -> ImportSummary:
    """JSONL/CSV rows (image path + captions) -> pool, task 3/task 0 queries and qrels in ``out_dir``.

    ``name`` prefixes every id (default: the input file's stem, reduced to letters, digits, - and _).
    ``options`` are forwarded, so each default is defined once: the row options of :func:`read_items`
    (``image_field``, ``caption_field``, ``id_field``, ``caption_sep``, ``fmt``, ``delimiter``,
    ``limit``) and the write options of :func:`write_dataset` (``seed``, ``all_captions``, ``check``,
    ``show_progress``, ``workers``).
    """
    started = time.perf_counter()
    path = Path(input_path)
    row_options = {k: options.pop(k) for k in inspect.signature(read_items).parameters if k in options}
    items = read_items(path, **row_options)
    if name is None:
        name = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in path.stem) or "data"
    return write_dataset(items, images_root=images_root, out_dir=out_dir, name=name, source=str(path),
                         started=started, **options)
