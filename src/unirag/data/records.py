"""Typed records for queries, candidates and relevance judgements.

They mirror M-BEIR's JSONL schema (the canonical interchange format, see ``mbeir.py``) so that a
record read from disk and written back is unchanged. Paths stay relative to an *images root*
given on the command line; :func:`resolve_image` joins them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Modality(StrEnum):
    """What a query or candidate holds: a text, an image, or both (M-BEIR's modality strings)."""

    TEXT = "text"
    IMAGE = "image"
    IMAGE_TEXT = "image,text"

    @classmethod
    def parse(cls, value: str) -> Modality:
        """``"text"``, ``"image"`` or ``"image,text"`` (parts in any order) -> the modality; ValueError otherwise."""
        try:
            return cls(",".join(sorted(p.strip() for p in str(value).split(","))))
        except ValueError:
            raise ValueError(f"unknown modality {value!r}; expected one of: text, image, image,text"
                             ) from None

    @property
    def has_image(self) -> bool:
        """True for image and image+text."""
        return self in (Modality.IMAGE, Modality.IMAGE_TEXT)

    @property
    def has_text(self) -> bool:
        """True for text and image+text."""
        return self in (Modality.TEXT, Modality.IMAGE_TEXT)

    def complement(self) -> Modality:
        """The single modality a pair needs next to this one (text <-> image)."""
        if self is Modality.IMAGE_TEXT:
            raise ValueError("an image+text candidate is already a pair; it has no complement")
        return Modality.IMAGE if self is Modality.TEXT else Modality.TEXT


@dataclass
class Candidate:
    """One item of the candidate pool: a caption, an image, or an image with text."""

    did: str
    modality: Modality
    txt: str | None = None
    img_path: str | None = None
    src_content: str | None = None
    # Identifier of the source item (e.g. the COCO image id). Candidates that share it form one
    # image-caption item, which is how a pool records its own pairing. On disk it lives in the
    # JSON of ``src_content`` under "source_id" (M-BEIR has no dedicated field); see mbeir.py.
    source_id: str | None = None


@dataclass
class Query:
    """One M-BEIR query: a text, an image or both, with the dids judged relevant to it.

    ``task_id`` is M-BEIR's task (0 text->image, 3 image->text, ...): with the dataset named by the
    qid it picks a UniIR query instruction. ``pos_cand_list`` are the query's positives, which
    leakage-free runs leave out of the few-shot examples.
    """

    qid: str
    modality: Modality
    txt: str | None = None
    img_path: str | None = None
    src_content: str | None = None
    pos_cand_list: list[str] = field(default_factory=list)
    neg_cand_list: list[str] = field(default_factory=list)
    task_id: int | None = None


@dataclass
class Qrels:
    """Relevance judgements: qid -> set of relevant dids (all judged relevant with grade 1)."""

    relevant: dict[str, set[str]] = field(default_factory=dict)
    task_ids: dict[str, int] = field(default_factory=dict)

    def add(self, qid: str, did: str, task_id: int | None = None) -> None:
        """Judge ``did`` relevant for ``qid``."""
        self.relevant.setdefault(qid, set()).add(did)
        if task_id is not None:
            self.task_ids[qid] = task_id

    def get(self, qid: str) -> set[str]:
        """The relevant dids of ``qid`` (empty when it has none)."""
        return self.relevant.get(qid, set())

    def __len__(self) -> int:
        return len(self.relevant)


@functools.lru_cache(maxsize=1 << 16)
def resolve_image(img_path: str | None, images_root: str | Path | None) -> Path | None:
    """Join a record's relative image path with the images root (absolute paths are kept).

    Remembered for the most recent 65,536 paths: every search resolves the image of each pair it
    offers, and building the path costs more than the rest of offering it."""
    if img_path is None:
        return None
    p = Path(img_path)
    if p.is_absolute() or images_root is None:
        return p
    return Path(images_root) / p
