"""Composed-image-retrieval benchmarks read from their official annotation files.

Every loader returns a :class:`CirDataset`: queries (reference image id, modification text, ground
truths, CIRR's ``img_set``) and the candidate pool (image id -> path relative to an images root).
Parsing needs the annotation files only; whether the images exist is checked when a run starts
(:meth:`CirDataset.missing_images`), so a user sees every missing file before any model call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.jsonl import read_json_file
from unirag.errors import InputError, existing_path

DATASETS = ("fashioniq", "cirr", "circo", "mbeir")
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp")


@dataclass
class CirQuery:
    qid: str
    reference: str            # image id of I_r
    text: str                 # modification text T_m
    targets: list[str] = field(default_factory=list)   # ground-truth image ids (empty on test splits)
    subset: list[str] | None = None                     # CIRR img_set members
    reference_path: str | None = None                   # when I_r is not a pool member (M-BEIR)
    target: str | None = None                           # CIRCO target_img_id (the caption's own target)


@dataclass
class CirDataset:
    name: str                 # e.g. "fashioniq-dress-val"
    kind: str                 # one of DATASETS
    queries: list[CirQuery]
    pool: dict[str, str]      # image id -> path relative to images_root
    images_root: Path | None = None
    #: CIRR's protocol removes the reference image from the gallery; the others keep it.
    exclude_reference: bool = False
    notes: list[str] = field(default_factory=list)

    def image_path(self, image_id: str, query: CirQuery | None = None) -> Path:
        rel = self.pool.get(image_id, query.reference_path if query is not None else None)
        if rel is None:
            raise InputError(f"image id {image_id!r} is not in the candidate pool of {self.name}")
        p = Path(rel)
        if not p.is_absolute() and self.images_root is not None:
            p = self.images_root / p
        # FashionIQ copies circulate as .png and .jpg: accept the same stem with another extension.
        return p if p.exists() else next((alt for ext in IMAGE_EXTS if (alt := p.with_suffix(ext)).exists()), p)

    def reference_path(self, q: CirQuery) -> Path:
        return self.image_path(q.reference, q)

    def missing_images(self) -> tuple[list[str], list[str]]:
        """(pool ids whose image is missing, qids whose reference image is missing)."""
        pool_missing = [i for i in self.pool if not self.image_path(i).exists()]
        ref_missing = [q.qid for q in self.queries if not self.reference_path(q).exists()]
        return pool_missing, ref_missing


def _load_json(path: Path, list_of: str | None = None) -> Any:
    """The JSON file at ``path``; ``list_of``: it must be a list of these."""
    data = read_json_file(existing_path(path))
    if list_of is not None and not isinstance(data, list):
        raise InputError(f"expected a JSON list of {list_of}", path=path)
    return data


def _field(obj: Any, key: str, path: Path, index: int, kind: type | tuple = str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"entry {index} lacks a required field", path=path, field=key)
    v = obj[key]
    if not isinstance(v, kind):
        raise InputError(f"entry {index}: expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}",
                         path=path, field=key)
    return v


def _split_of(path: Path, pattern: str, split_file: str | Path | None) -> tuple[re.Match | None, Path]:
    """An annotation file's name read by ``pattern`` (``cap.<category>.<split>.json``; None: another
    name) and the image split file: ``split_file``, else ``../image_splits/split.<category>.<split>.json``."""
    m = re.search(pattern, path.name)
    if split_file is not None:
        return m, Path(split_file)
    if not m:
        raise InputError("cannot infer the image split file from this name; pass --split-file", path=path)
    return m, path.parent.parent / "image_splits" / f"split.{m.group(1)}.{m.group(2)}.json"


# -- FashionIQ --------------------------------------------------------------------------------------


def join_fashioniq_captions(captions: list[str], query_text: str = "paper") -> str:
    """The two relative captions as one query text (setting ``xr_query_text``).

    ``paper``: as CLIP4Cir / CIReVL, each stripped of whitespace and '.?, ', an empty one dropped,
    joined by ' and '. ``official``: as the official X^R loader, only '.? ' stripped from the first two
    and always joined, so an empty second caption leaves ``"... and "`` (a file with fewer than two
    captions, where the official code stops, gets the ones it has).
    """
    if query_text == "official":
        return " and ".join(c.strip(".? ") for c in captions[:2])
    parts = [c.strip().strip(".?, ") for c in captions if c and c.strip().strip(".?, ")]
    return " and ".join(parts)


def load_fashioniq(annotations: str | Path, images_root: Path | None = None,
                   split_file: str | Path | None = None, query_text: str = "paper") -> CirDataset:
    """``cap.<category>.<split>.json`` -> queries; ``image_splits/split.<category>.<split>.json`` -> pool.

    Images are looked up as ``<images_root>/<asin>.png`` (a .jpg of the same name is accepted).
    ``query_text``: how the two captions become one text (:func:`join_fashioniq_captions`).
    """
    path = Path(annotations)
    m, split_path = _split_of(path, r"cap\.(\w+)\.(\w+)\.json$", split_file)
    category, split = (m.group(1), m.group(2)) if m else ("fashioniq", "unknown")
    names = _load_json(split_path, "image names")
    queries = []
    for i, e in enumerate(_load_json(path, "annotations")):
        cand = _field(e, "candidate", path, i)
        caps = _field(e, "captions", path, i, list)
        target = e.get("target")
        queries.append(CirQuery(qid=f"{category}-{i}", reference=cand, text=join_fashioniq_captions(caps, query_text),
                                targets=[target] if isinstance(target, str) else []))
    pool = {str(n): f"{n}.png" for n in names}
    return CirDataset(f"fashioniq-{category}-{split}", "fashioniq", queries, pool, images_root)


# -- CIRR -------------------------------------------------------------------------------------------
def load_cirr(annotations: str | Path, images_root: Path | None = None,
              split_file: str | Path | None = None, query_text: str = "paper") -> CirDataset:
    """``captions/cap.rc2.<split>.json`` -> queries (qid = pairid); ``image_splits/split.rc2.<split>.json``
    (name -> relative path) -> pool. The reference is excluded from the gallery, as CIRR evaluates.
    ``query_text``: how a caption becomes the query text: ``paper`` keeps it as written; ``official`` strips
    whitespace and replaces an empty caption by "the same image", as the official X^R loader."""
    path = Path(annotations)
    m, split_path = _split_of(path, r"cap\.(rc2)\.(\w+)\.json$", split_file)
    split = m.group(2) if m else "unknown"
    names = _load_json(split_path)
    if not isinstance(names, dict):
        raise InputError("expected a JSON object mapping image name -> relative path", path=split_path)
    queries = []
    for i, e in enumerate(_load_json(path, "annotations")):
        pairid = _field(e, "pairid", path, i, int)
        img_set = _field(e, "img_set", path, i, dict)
        members = img_set.get("members")
        if not isinstance(members, list):
            raise InputError(f"entry {i}: img_set has no members list", path=path, field="img_set")
        target = e.get("target_hard")
        reference, caption = _field(e, "reference", path, i), _field(e, "caption", path, i)
        queries.append(CirQuery(qid=str(pairid), reference=reference,
                                text=(caption.strip() or "the same image") if query_text == "official" else caption,
                                subset=[str(x) for x in members],
                                targets=[target] if isinstance(target, str) else []))
    pool = {str(k): str(v).removeprefix("./") for k, v in names.items()}
    return CirDataset(f"cirr-{split}", "cirr", queries, pool, images_root, exclude_reference=True)


# -- CIRCO ------------------------------------------------------------------------------------------
def load_circo(annotations: str | Path, images_root: Path | None = None,
               split_file: str | Path | None = None, query_text: str = "paper") -> CirDataset:
    """``annotations/{val,test}.json`` -> queries (several ground truths each; none on test).

    The pool is COCO 2017 unlabeled: from ``split_file`` (COCO ``image_info_unlabeled2017.json``) when
    given, else every ``unlabeled2017/*.jpg`` under the images root, else (annotations only) the images
    the annotations mention - a note says so, as metrics on that reduced pool are not comparable.
    The relative caption is the query text as written under either ``query_text`` (the official
    loader keeps it too, XR/utils/data.py ``load_CIRCO``).
    """
    path = Path(annotations)
    queries = []
    mentioned: set[str] = set()
    for i, e in enumerate(_load_json(path, "annotations")):
        ref = str(_field(e, "reference_img_id", path, i, int))
        gts = [str(g) for g in e.get("gt_img_ids") or []]
        target = e.get("target_img_id")
        if gts and target is None:
            raise InputError(f"entry {i} has gt_img_ids but no target_img_id (CIRCO's recall counts only that "
                             "image)", path=path, field="target_img_id")
        queries.append(CirQuery(qid=str(_field(e, "id", path, i, int)), reference=ref,
                                text=_field(e, "relative_caption", path, i), targets=gts,
                                target=str(_field(e, "target_img_id", path, i, int)) if target is not None else None))
        mentioned.update([ref, *gts])
    notes = []
    if split_file is not None:
        info = _load_json(Path(split_file))
        images = info.get("images") if isinstance(info, dict) else None
        if not isinstance(images, list):
            raise InputError("expected a COCO image-info JSON with an 'images' list", path=split_file,
                             field="images")
        ids = [str(_field(im, "id", Path(split_file), j, int)) for j, im in enumerate(images)]
    elif images_root is not None and (images_root / "unlabeled2017").is_dir():
        ids = sorted(str(int(p.stem)) for p in (images_root / "unlabeled2017").glob("*.jpg"))
    else:
        ids = sorted(mentioned, key=int)
        notes.append("CIRCO pool = only the images the annotations mention (no image list given); "
                     "metrics are not comparable to the official 123,403-image gallery")
    pool = {i: f"unlabeled2017/{int(i):012d}.jpg" for i in ids}
    return CirDataset(f"circo-{path.stem}", "circo", queries, pool, images_root, notes=notes)


# -- M-BEIR task 7 (image,text -> image) ------------------------------------------------------------
def load_mbeir_cir(annotations: str | Path, images_root: Path | None = None,
                   split_file: str | Path | None = None, query_text: str = "paper") -> CirDataset:
    """M-BEIR query JSONL (task 7 lines are used) + its candidate pool JSONL (``split_file``).
    The query text is kept as written under either ``query_text`` (no official X^R loader reads M-BEIR)."""
    from unirag.data.mbeir import load_pool, read_queries

    if split_file is None:
        raise InputError("M-BEIR CIR needs the candidate pool JSONL: pass --split-file POOL.jsonl",
                         path=annotations)
    pool = {did: c.img_path for did, c in load_pool(split_file).items() if c.img_path and c.modality.has_image}
    by_path = {p: did for did, p in pool.items()}
    queries = []
    for q in read_queries(annotations):
        if q.task_id not in (None, 7) or not q.modality.has_image or not q.txt:
            continue
        # A reference image that is also a pool image takes the pool id (so it can be excluded).
        ref = by_path.get(q.img_path)
        queries.append(CirQuery(qid=q.qid, reference=ref or f"query:{q.qid}", text=q.txt,
                                targets=list(q.pos_cand_list), reference_path=None if ref else q.img_path))
    if not queries:
        raise InputError("no image,text -> image (task 7) queries in this file", path=annotations)
    return CirDataset(f"mbeir-{Path(annotations).stem}", "mbeir", queries, pool, images_root)


LOADERS = {"fashioniq": load_fashioniq, "cirr": load_cirr, "circo": load_circo, "mbeir": load_mbeir_cir}


def load_dataset(kind: str, annotations: str | Path, images_root: str | Path | None = None,
                 split_file: str | Path | None = None, limit: int | None = None,
                 exclude_reference: bool | None = None, *, query_text: str = "paper",
                 cirr_val_limit: int | None = None) -> CirDataset:
    """Load any supported benchmark. ``exclude_reference`` overrides the benchmark's own protocol
    (only CIRR removes the reference image from the gallery). ``query_text`` and ``cirr_val_limit``
    are the settings ``xr_query_text`` and ``xr_cirr_val_limit`` (docs/xr-parity.md): how the query
    texts are read, and how many of CIRR's validation queries (``cap.rc2.val.json``) are kept, before
    ``limit`` cuts every file."""
    if kind not in LOADERS:
        raise InputError(f"unknown CIR dataset {kind!r}; expected one of {', '.join(DATASETS)}")
    existing_path(annotations, "annotation file")
    ds = LOADERS[kind](annotations, Path(images_root) if images_root else None, split_file, query_text=query_text)
    if cirr_val_limit is not None and ds.name == "cirr-val" and len(ds.queries) > cirr_val_limit:
        ds.notes.append(f"CIRR validation: only the first {cirr_val_limit} of {len(ds.queries)} queries "
                        "(xr_cirr_val_limit, as the official loader)")
        ds.queries = ds.queries[:cirr_val_limit]
    ds.queries = ds.queries[:limit]  # None: every query
    if exclude_reference is not None:
        ds.exclude_reference = exclude_reference
    return ds
