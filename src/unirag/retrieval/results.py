"""The result of retrieving for one query: ranked hits (:class:`Hits`) and image-caption pairs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from unirag.data.records import resolve_image


@dataclass
class Pair:
    """An image-caption example: the one pair type from the retriever through the prompt, the
    generators and the run records. For an image+text candidate both dids are the same.

    ``img_path`` is as the pool records it (relative to :attr:`images_root`); :attr:`image` is the
    file (or the in-memory ``pixels``) and :attr:`caption` the text, which is what a generator is
    shown. A pair built from an ``(image, caption)`` tuple (:meth:`of`) has no dids.
    """

    image_did: str | None
    text_did: str | None
    img_path: str | None
    txt: str | None
    score: float | None = None
    #: how the pair was made: "pool" (the pool's own pairing: same source item), "qrels" (M-BEIR
    #: judgements, ``pairs_from``), "retrieval" (nearest candidate of the other modality), or "fused".
    via: str | None = None
    #: the folder ``img_path`` is relative to (not written to run files: they stay relocatable).
    images_root: str | None = field(default=None, repr=False, compare=False)
    #: why the leakage guard flagged this example as a near-duplicate of the query
    #: (``"image-hash:3"``, ``"image-cosine:0.981"``, ``"caption:0.92"``), or None.
    near_duplicate: str | None = None
    #: an in-memory image (PIL, encoded bytes or a uint8 array) shown instead of a file.
    pixels: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, image: Any, caption: str | None, did: str | None = None) -> Pair:
        """A pair from an image (a path, or an in-memory image), its caption and the image's did."""
        if isinstance(image, str | Path):
            return cls(did, None, str(image), caption)
        return cls(did, None, None, caption, pixels=image)

    @property
    def image(self) -> Any:
        """What a generator is shown: the image file (joined to :attr:`images_root`), or :attr:`pixels`."""
        return self.pixels if self.pixels is not None else resolve_image(self.img_path, self.images_root)

    @property
    def caption(self) -> str | None:
        """The example's caption."""
        return self.txt

    @property
    def label(self) -> str | None:
        """A name for logs and rendered prompts: the image did, else the text did."""
        return self.image_did or self.text_did

    def rooted(self, images_root: str | Path | None) -> Pair:
        """This pair with its relative image path read against ``images_root`` (None: unchanged)."""
        if images_root is None or self.pixels is not None:
            return self
        return replace(self, images_root=str(images_root))

    def to_json(self) -> dict[str, Any]:
        """The run-file form (relative image path, score rounded to 6 decimals)."""
        out = {"image_did": self.image_did, "text_did": self.text_did, "img_path": self.img_path, "txt": self.txt,
               "score": round(float(self.score), 6) if self.score is not None else None, "via": self.via}
        if self.near_duplicate is not None:
            out["near_duplicate"] = self.near_duplicate
        return out

    def as_record(self) -> dict[str, Any]:
        """The form a caption record's ``examples`` list holds (no score, no ``via``)."""
        return {k: v for k, v in self.to_json().items() if k not in ("score", "via")}


@dataclass(frozen=True)
class Hit:
    """One retrieved candidate (``did``, ``score``, ``modality``) with its image-caption ``pair``.

    The one hit type: a run file's ranked ``candidates`` (what retrieval metrics score) are hits
    without their pair. ``pair`` is None when every pair for this candidate would have shown the
    query itself. ``replaced`` names the wrong-modality hit this candidate stands in for (paper §5).
    A composed-retrieval (X^R) hit has no ``score`` (its rank is its place in the list), the
    ``stage`` that ranked it ("baseline", "xr_coarse" or "xr") and, for the fine stage's top k',
    its ``scores``.
    """

    did: str
    score: float | None
    modality: str
    pair: Pair | None = None
    replaced: str | None = None
    stage: str | None = None
    scores: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        """The run-file form of a ranked candidate (score rounded to 6 decimals; no pair)."""
        out = {"did": self.did, "score": round(float(self.score), 6), "modality": self.modality}
        if self.replaced is not None:
            out["replaced"] = self.replaced
        return out


class Hits(list):
    """The ranked :class:`Hit` list of one query and its ``pairs``, the k few-shot examples: what a
    search returns and one line of the run file ``unirag retrieve`` writes (:meth:`to_json`).

    The hits are the ranked list retrieval metrics score (after the §5 wrong-modality replacement);
    ``pairs`` are kept apart because a hit can be correct while its pair must be dropped (it would
    show the query itself to the generator). When a candidate's own pair is dropped, a later hit may
    supply one, so ``pairs`` can hold pairs that no hit in the list carries. Pass a ``Hits`` to
    :meth:`unirag.Captioner.caption`.
    """

    def __init__(self, hits=(), pairs=(), qid: str | None = None, raw: list[str] | None = None,
                 near_duplicates: dict[str, int] | None = None) -> None:
        super().__init__(hits)
        self.pairs: list[Pair] = list(pairs)
        self.qid = qid
        #: the first k dids as the index returned them, before the wrong-modality replacement (what
        #: UniIR's Recall@k scores); None in run files written before unirag recorded it.
        self.raw = raw
        #: the leakage guard's count for this query: ``{"flagged": n, "excluded": m}`` (None: guard off).
        #: Under "report" flagged examples stay in ``pairs`` (marked); under "exclude" they were replaced.
        self.near_duplicates = near_duplicates

    @property
    def dids(self) -> list[str]:
        """The ranked dids."""
        return [h.did for h in self]

    def to_json(self) -> dict[str, Any]:
        """The run-file line (hits without their pairs, which are listed once in ``pairs``)."""
        out = {"qid": self.qid, "candidates": [c.to_json() for c in self], "pairs": [p.to_json() for p in self.pairs]}
        if self.raw is not None:
            out["raw"] = list(self.raw)
        if self.near_duplicates is not None:
            out["near_duplicates"] = dict(self.near_duplicates)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Hits:
        """The hits of a run-file line (:meth:`to_json`; the hits carry no pair, ``pairs`` holds them)."""
        cands = [Hit(str(c["did"]), float(c["score"]), str(c["modality"]), replaced=c.get("replaced"))
                 for c in obj.get("candidates", [])]
        pairs = [Pair(str(p["image_did"]), str(p["text_did"]), p.get("img_path"), p.get("txt"),
                      p.get("score"), p.get("via"), near_duplicate=p.get("near_duplicate"))
                 for p in obj.get("pairs", [])]
        raw = obj.get("raw")
        found = obj.get("near_duplicates")
        return cls(cands, pairs, str(obj["qid"]), [str(d) for d in raw] if raw is not None else None,
                   dict(found) if isinstance(found, dict) else None)

    def __repr__(self) -> str:
        return f"Hits({list.__repr__(self)}, pairs={self.pairs!r})"
