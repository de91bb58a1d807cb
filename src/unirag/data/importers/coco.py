"""Import COCO captions (the official JSON, or a one-image-per-line JSONL) into M-BEIR files.

Official format (``captions_val2017.json``): ``images`` [{id, file_name, license, flickr_url, ...}],
``annotations`` [{id, image_id, caption}], ``licenses`` [{id, name, url}]. ``file_name`` is relative
to the images folder given with ``--images``.

JSONL format (how ``coco-val2017-mini/captions.jsonl`` is laid out): one object per image with
``image`` (path relative to the images root), ``captions`` (list), ``image_id`` and licence fields.

Ids: ``coco:img:<image id>``, ``coco:txt:<annotation id>`` (JSONL: ``coco:txt:<image id>.<k>``, since it
has no annotation ids); queries ``coco:q3:<image id>`` and ``coco:q0:<caption key>``. See ``writer.py``.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from unirag.data.importers.generic import read_items, source_id
from unirag.data.importers.writer import ImportSummary, SourceItem, write_dataset
from unirag.data.jsonl import read_json_file
from unirag.data.text import iter_text_lines
from unirag.errors import InputError, existing_path


def _list(data: dict, key: str, path: Path) -> list:
    v = data.get(key)
    if not isinstance(v, list):
        raise InputError("missing field" if v is None else "expected a list", path=path, field=key)
    return v


def read_coco(captions: str | Path, *, limit: int | None = None) -> tuple[list[SourceItem], int]:
    """Images with their captions from an official COCO captions JSON or a ``{image, image_id, captions}``
    JSONL file; also returns the number of captions whose ``image_id`` is not among the images (JSON only:
    reported, then skipped)."""
    path = existing_path(captions)
    jsonl = path.suffix.lower() == ".jsonl"  # .json: official; another suffix: sniff the first line
    if path.suffix.lower() not in (".jsonl", ".json"):
        with contextlib.closing(iter_text_lines(path)) as lines:
            first = next(lines, (0, ""))[1]
        try:
            obj = json.loads(first)
        except (json.JSONDecodeError, RecursionError):
            obj = None  # a pretty-printed or single-line official file is parsed (and diagnosed) as JSON
        jsonl = isinstance(obj, dict) and "images" not in obj and "annotations" not in obj
    if jsonl:
        return read_items(path, image_field="image", caption_field="captions", id_field="image_id", fmt="jsonl",
                          limit=limit), 0
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object with 'images' and 'annotations'", path=path)
    images = _list(data, "images", path)
    annotations = _list(data, "annotations", path)
    licenses: dict[str, dict[str, Any]] = {}
    for lic in _list(data, "licenses", path) if data.get("licenses") is not None else []:  # optional
        if isinstance(lic, dict) and lic.get("id") is not None:
            licenses[str(lic["id"])] = lic

    items: dict[str, SourceItem] = {}
    for i, img in enumerate(images):
        where = f"images[{i}]"
        if not isinstance(img, dict):
            raise InputError("expected an object", path=path, field=where)
        image_id = source_id(img, "id", path, f"{where}.id")
        file_name = img.get("file_name")
        if not isinstance(file_name, str) or not file_name.strip():
            raise InputError("missing or empty file name", path=path, field=f"{where}.file_name")
        if image_id in items:
            raise InputError(f"duplicate image id {image_id}", path=path, field=f"{where}.id")
        meta: dict[str, Any] = {"image_id": img["id"], "file_name": file_name}
        lic = licenses.get(str(img.get("license")))
        if lic is not None:
            meta["license"] = lic.get("name")
            meta["license_url"] = lic.get("url")
        meta.update({key: img[key] for key in ("flickr_url", "coco_url", "width", "height")
                     if img.get(key) is not None})
        items[image_id] = SourceItem(
            source_id=image_id, img_path=file_name.strip(), captions=[], meta=meta, origin=f"{path}, {where}"
        )

    orphans = 0
    seen_ann: set[str] = set()
    for j, ann in enumerate(annotations):
        where = f"annotations[{j}]"
        if not isinstance(ann, dict):
            raise InputError("expected an object", path=path, field=where)
        ann_id = source_id(ann, "id", path, f"{where}.id")
        image_id = source_id(ann, "image_id", path, f"{where}.image_id")
        caption = ann.get("caption")
        if not isinstance(caption, str) or not caption.strip():
            raise InputError("missing or empty caption", path=path, field=f"{where}.caption")
        if ann_id in seen_ann:
            raise InputError(f"duplicate annotation id {ann_id}", path=path, field=f"{where}.id")
        seen_ann.add(ann_id)
        item = items.get(image_id)
        if item is None:
            orphans += 1
            continue
        item.captions.append((ann_id, caption.strip()))
    return list(items.values())[:limit], orphans


def import_coco(
    captions: str | Path,
    images_root: str | Path,
    out_dir: str | Path,
    *,
    limit: int | None = None,
    name: str = "coco",
    **write_options: Any,
) -> ImportSummary:
    """COCO captions + image folder -> shared pool, task 3 (image->text) and task 0 (text->image) queries.

    ``limit`` keeps the first N images of the file. ``write_options`` (``seed``, ``all_captions``,
    ``check``, ``show_progress``, ``workers``) go to :func:`write_dataset`, which defines their
    defaults for every importer: ``all_captions=False`` samples one caption per image as the
    text->image query, seeded by ``seed``, as the paper does.
    """
    started = time.perf_counter()
    items, orphans = read_coco(captions, limit=limit)
    return write_dataset(items, images_root=images_root, out_dir=out_dir, name=name, source=str(captions),
                         started=started, captions_without_image=orphans, **write_options)
