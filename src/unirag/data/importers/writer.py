"""Turn image-caption items into the M-BEIR files every later stage reads.

Both importers (COCO, generic JSONL/CSV) parse their input into :class:`SourceItem` s and hand them
to :func:`write_dataset`, so the id scheme, the image check, the query sampling and the output files
are defined once.

Id scheme (stable: re-importing the same input gives the same ids):

- image candidate   ``<name>:img:<source_id>``   (COCO: the COCO image id)
- text candidate    ``<name>:txt:<caption_key>`` (COCO: the caption annotation id)
- image->text query ``<name>:q3:<source_id>``    (task 3; positives = that image's caption dids)
- text->image query ``<name>:q0:<caption_key>``  (task 0; positive = the image did)

Pairing: an image and its captions share ``source_id`` (stored in ``src_content``), which is how the
retrieval stage completes a retrieved caption into an image-caption pair (paper section 3.1).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.images import BadImageReport, image_problem
from unirag.data.mbeir import write_candidates, write_qrels, write_queries
from unirag.data.records import Candidate, Modality, Query, resolve_image
from unirag.errors import InputError
from unirag.runs.atomic import atomic_write_json

#: The files an import writes, by the key ``ImportSummary.files`` and the summary's ``files`` use.
FILES = {"pool": "pool.jsonl", "queries_task3": "queries_task3_image2text.jsonl",
         "queries_task0": "queries_task0_text2image.jsonl", "qrels_task3": "qrels_task3.txt",
         "qrels_task0": "qrels_task0.txt", "summary": "import_summary.json"}

TASK_TEXT_TO_IMAGE = 0
TASK_IMAGE_TO_TEXT = 3

CHECK_MODES = ("decode", "verify", "exists", "none")


@dataclass
class SourceItem:
    """One image with its captions, as parsed from the input (before any image check)."""

    source_id: str
    img_path: str  # relative to the images root, as written in the input
    captions: list[tuple[str, str]]  # (caption_key, caption text); keys unique within the dataset
    # licence, urls, product attributes ... -> src_content of the image *and* its captions, so a filter
    # on a field (``--filter gender=Men``) finds the captions of matching images too
    meta: dict[str, Any] = field(default_factory=dict)
    origin: str = ""  # "file:line" or "file, images[3]" for messages


@dataclass
class ImportSummary:
    """What an import wrote and what it skipped (also saved as ``import_summary.json``)."""

    out_dir: Path
    images_root: Path
    source: str
    n_image_candidates: int
    n_text_candidates: int
    n_queries_image2text: int
    n_queries_text2image: int
    skipped_images: BadImageReport
    skipped_captions: int
    images_without_captions: int
    captions_without_image: int
    all_captions: bool
    seed: int
    check: str
    seconds: float
    #: image paths that resolve outside the images root, imported because allow_outside_root was given
    outside_root: list[tuple[str, str]] = field(default_factory=list)

    @property
    def files(self) -> dict[str, Path]:
        return {k: self.out_dir / v for k, v in FILES.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "images_root": str(self.images_root),
            "pool": {
                "image": self.n_image_candidates,
                "text": self.n_text_candidates,
                "total": self.n_image_candidates + self.n_text_candidates,
            },
            "queries": {
                "task3_image2text": self.n_queries_image2text,
                "task0_text2image": self.n_queries_text2image,
            },
            "text2image_queries": "all captions"
            if self.all_captions
            else f"one caption per image, seed {self.seed}",
            "image_check": self.check,
            "skipped_images": {
                "count": len(self.skipped_images),
                "images": [{"path": p, "reason": r} for p, r in self.skipped_images.bad],
            },
            "outside_images_root": {"count": len(self.outside_root), "allowed": bool(self.outside_root),
                                    "images": [{"img_path": p, "resolved": r} for p, r in self.outside_root]},
            "skipped_captions": self.skipped_captions,
            "images_without_captions": self.images_without_captions,
            "captions_without_image": self.captions_without_image,
            "files": {k: v.name for k, v in self.files.items()},
            "seconds": round(self.seconds, 3),
        }

    def format(self) -> str:
        """A few lines for the terminal."""
        lines = [
            f"imported {self.source} -> {self.out_dir}",
            f"  pool: {self.n_image_candidates} images + {self.n_text_candidates} captions",
            f"  queries: {self.n_queries_image2text} image->text (task 3), "
            f"{self.n_queries_text2image} text->image (task 0, "
            + ("all captions)" if self.all_captions else f"one per image, seed {self.seed})"),
        ]
        if self.skipped_images:
            lines.append("  " + self.skipped_images.summary().replace("\n", "\n  "))
            lines.append(f"  skipped with them: {self.skipped_captions} caption(s)")
        elif self.check != "none":
            lines.append(f"  images checked ({self.check}): all readable")
        if self.outside_root:
            lines.append(f"  {len(self.outside_root)} image path(s) outside the images root, imported as asked "
                         "(--allow-outside-images); unirag serve does not serve them")
        if self.images_without_captions:
            lines.append(f"  {self.images_without_captions} image(s) have no caption: pool only, no query")
        if self.captions_without_image:
            lines.append(
                f"  {self.captions_without_image} caption(s) name an image id not in the input: skipped"
            )
        lines.append(f"  {self.seconds:.2f} s")
        return "\n".join(lines)


def build_records(
    items: list[SourceItem], *, name: str, seed: int = 0, all_captions: bool = False
) -> tuple[list[Candidate], list[Query], list[Query]]:
    """The shared pool (each image, then its captions) and the task 3 / task 0 queries of ``items``.

    Captions inherit their image's metadata fields in ``src_content`` (filters search either modality)."""
    pool: list[Candidate] = []
    q_i2t: list[Query] = []
    q_t2i: list[Query] = []
    for it in items:
        img_did = f"{name}:img:{it.source_id}"
        src = json.dumps({**it.meta, "source_id": it.source_id}, ensure_ascii=False)
        pool.append(
            Candidate(
                did=img_did,
                modality=Modality.IMAGE,
                img_path=it.img_path,
                src_content=src,
                source_id=it.source_id,
            )
        )
        txt_dids = [f"{name}:txt:{key}" for key, _ in it.captions]
        for (key, text), did in zip(it.captions, txt_dids, strict=True):
            pool.append(
                Candidate(
                    did=did,
                    modality=Modality.TEXT,
                    txt=text,
                    src_content=json.dumps({**it.meta, "source_id": it.source_id, "caption_id": key},
                                           ensure_ascii=False),
                    source_id=it.source_id,
                )
            )
        if not txt_dids:
            continue
        q_i2t.append(
            Query(
                qid=f"{name}:q3:{it.source_id}",
                modality=Modality.IMAGE,
                img_path=it.img_path,
                src_content=json.dumps({"source_id": it.source_id}),
                pos_cand_list=txt_dids,
                task_id=TASK_IMAGE_TO_TEXT,
            )
        )
        # One caption per image, as the paper samples its text->image queries; seeded per image so the
        # choice for an image does not change when other images are added, removed or skipped.
        chosen = it.captions if all_captions else [random.Random(f"{seed}:{it.source_id}").choice(it.captions)]
        for key, text in chosen:
            q_t2i.append(
                Query(
                    qid=f"{name}:q0:{key}",
                    modality=Modality.TEXT,
                    txt=text,
                    src_content=json.dumps({"source_id": it.source_id, "caption_id": key}),
                    pos_cand_list=[img_did],
                    task_id=TASK_TEXT_TO_IMAGE,
                )
            )

    return pool, q_i2t, q_t2i


def write_dataset(
    items: Iterable[SourceItem],
    *,
    images_root: str | Path,
    out_dir: str | Path,
    name: str,
    source: str,
    seed: int = 0,
    all_captions: bool = False,
    check: str = "decode",
    show_progress: bool = True,
    started: float,
    captions_without_image: int = 0,
    workers: int = 4,
    allow_outside_root: bool = False,
) -> ImportSummary:
    """Check images, build the shared pool, the queries of both directions and their qrels; write them.

    Image paths must stay inside ``images_root`` (no ``..``, absolute paths or symlinks leading out):
    otherwise an :class:`InputError` names the first such item, unless ``allow_outside_root`` is
    given, in which case they are imported and listed in the summary (``outside_images_root``).
    """
    if check not in CHECK_MODES:
        raise InputError(f"unknown image check {check!r}; expected one of {', '.join(CHECK_MODES)}")
    if not name or any(ch.isspace() or ch == ":" for ch in name):
        raise InputError(f"dataset name {name!r} must be non-empty, without whitespace or ':'")
    items = list(items)
    if not items:
        raise InputError("no images found in the input", path=source)
    for it in items:  # their uniqueness is the readers' check, which names the input's own fields
        for part in (it.source_id, *[k for k, _ in it.captions]):
            if not part or any(ch.isspace() for ch in part):
                raise InputError(f"id {part!r} is empty or contains whitespace (ids go into qrels lines)",
                                 path=it.origin or source)
    images_root = Path(images_root)
    if check != "none" and not images_root.is_dir():
        raise InputError("images root is not a directory", path=images_root)
    # image paths that resolve outside the root: '..' segments, absolute paths and symlinks pointing
    # elsewhere (the path is resolved, links followed, before comparing)
    paths = [resolve_image(it.img_path, images_root) for it in items]
    outside = [(it, resolved) for it, path in zip(items, paths, strict=True)
               if not (resolved := path.resolve()).is_relative_to(images_root.resolve())]
    if outside and not allow_outside_root:
        it, resolved = outside[0]
        raise InputError(
            f"{len(outside)} image path(s) resolve outside the images root {images_root.resolve()}, e.g. "
            f"{it.img_path!r} -> {resolved} ('..', an absolute path or a symlink leading out). Copy the images "
            "under the root, or pass --allow-outside-images (allow_outside_root=True) to import them anyway",
            path=it.origin or source,
        )
    report, bad = BadImageReport(), set()  # unusable images, and the source ids skipped with them
    if check != "none":  # threads, because Pillow releases the GIL while decoding; results in input order
        from concurrent.futures import ThreadPoolExecutor

        from tqdm.auto import tqdm

        with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
            reasons = ex.map(lambda p: image_problem(p, check), paths, chunksize=16)
            for it, path, reason in tqdm(
                zip(items, paths, reasons, strict=True),
                total=len(items),
                unit="img",
                desc=f"checking images ({check})",
                disable=not show_progress,
            ):
                if reason is not None:
                    report.add(path, reason)
                    bad.add(it.source_id)
    good = [it for it in items if it.source_id not in bad]
    skipped_captions = sum(len(it.captions) for it in items) - sum(len(it.captions) for it in good)
    if not good:  # with a likely fix: paths that already start with the root folder's name, ...
        first, hint = Path(items[0].img_path), ""
        if (
            not first.is_absolute()
            and first.parts[0] == images_root.name
            and (images_root.parent / first).exists()
        ):
            hint = f" The paths already start with '{first.parts[0]}/': pass its parent, {images_root.parent}."
        elif len(first.parts) > 1 and (images_root / first.name).exists():  # ... or name a folder it lacks
            hint = f" {first.name} is directly in the images root, but the paths name a folder '{first.parent}/'."
        raise InputError(
            f"none of the {len(items)} images is readable (image paths are resolved against the "
            f"images root, e.g. {paths[0]}).{hint}\n{report.summary()}",
            path=source,
        )

    pool, q_i2t, q_t2i = build_records(good, name=name, seed=seed, all_captions=all_captions)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # A rerun into the same folder counts as complete only once its new summary is written.
    (out_dir / FILES["summary"]).unlink(missing_ok=True)
    write_candidates(out_dir / FILES["pool"], pool)
    for task, queries in (("task3", q_i2t), ("task0", q_t2i)):
        write_queries(out_dir / FILES[f"queries_{task}"], queries)
        write_qrels(out_dir / FILES[f"qrels_{task}"], queries)
    summary = ImportSummary(
        out_dir=out_dir,
        images_root=images_root.resolve(),
        source=source,
        n_image_candidates=len(good),
        n_text_candidates=len(pool) - len(good),
        n_queries_image2text=len(q_i2t),
        n_queries_text2image=len(q_t2i),
        skipped_images=report,
        skipped_captions=skipped_captions,
        images_without_captions=sum(1 for it in good if not it.captions),
        captions_without_image=captions_without_image,
        all_captions=all_captions,
        seed=seed,
        check=check,
        outside_root=[(it.img_path, str(r)) for it, r in outside if it.source_id not in bad],
        seconds=time.perf_counter() - started,
    )
    atomic_write_json(out_dir / FILES["summary"], summary.to_json())  # last: its presence = import complete
    return summary
