"""Complete a single-modality candidate into an image-caption pair (paper §3.1).

The complement of a candidate is a candidate of the opposite modality that differs from the query
(so the pair cannot reveal the answer). It comes from the pool's own pairing when the pool records
one (candidates sharing a ``source_id``; among several, the one closest to the candidate in the
embedding space first), and otherwise - or when every paired complement equals the query - by
retrieval: the candidate's vector as query, the top hits of the opposite modality, the first
acceptable one. Between the two, true pairs named by M-BEIR judgements (``Selection.pairs_from``,
:func:`read_qrels_pairs`) are tried.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unirag.data.mbeir import read_qrels, read_queries
from unirag.data.records import Modality, Query, resolve_image
from unirag.errors import ConfigError
from unirag.index.handle import Index

RETRIEVAL_DEPTHS = (10, 100)


def normalise_text(text: str | None) -> str | None:
    return " ".join(text.split()).casefold() if text else None


@dataclass
class QueryIdentity:
    """What a candidate must differ from: the query's text and image, and excluded dids."""

    text: str | None
    image_paths: frozenset[str]
    excluded: frozenset[str]
    #: the query's text and image path exactly as recorded (UniIR's completion compares these; see uniir_pairs)
    raw_text: str | None = None
    raw_image: str | None = None

    @classmethod
    def of(cls, query: Query, query_images_root: str | Path | None, excluded: set[str] | None = None
           ) -> QueryIdentity:
        return cls(normalise_text(query.txt) if query.modality.has_text else None,
                   frozenset(_image_keys(query.img_path, query_images_root)) if query.modality.has_image
                   else frozenset(), frozenset(excluded or ()),
                   query.txt if query.modality.has_text else None,
                   query.img_path if query.modality.has_image else None)

    def same_text(self, text: str | None) -> bool:
        return self.text is not None and normalise_text(text) == self.text

    def same_image(self, img_path: str | None, images_root: str | Path | None) -> bool:
        return bool(self.image_paths) and not self.image_paths.isdisjoint(_image_keys(img_path, images_root))


def _image_keys(img_path: str | None, images_root: str | Path | None) -> set[str]:
    """Spellings under which two records point at the same image file (relative and absolute)."""
    if not img_path:
        return set()
    return {os.path.normpath(img_path), os.path.realpath(resolve_image(img_path, images_root))}


class Completer:
    """Finds complements; per-candidate orders are cached (they do not depend on the query).

    ``pairs_from``: M-BEIR query and/or qrels files whose true pairs are tried after the pool's pairing.
    """

    def __init__(self, index: Index, images_root: str | Path | None,
                 pairs_from: Sequence[str | Path] = ()) -> None:
        self.index = index
        self.images_root = images_root
        #: qid -> the positives the ``pairs_from`` files give for it (its reference captions or images)
        self._qrels, self.positives = read_qrels_pairs(index, pairs_from) if pairs_from else ({}, {})
        self._paired: dict[int, list[int]] = {}
        self._retrieved: dict[tuple[int, int], list[int]] = {}

    def complement(self, gid: int, ident: QueryIdentity) -> tuple[int, str] | None:
        """(global id, "pool" | "qrels" | "retrieval") of the complement of candidate ``gid``, or None."""
        meta, metas = self.index.metas[gid], self.index.metas
        want = meta.modality.complement()
        if gid not in self._paired:  # the pool's own pairing: the same source item, the nearest first
            group = [g for g in self.index.source_group(meta.source_id) if metas[g].modality is want]
            if len(group) > 1:
                sims = self.index.vectors(group) @ self.index.vectors([gid])[0]
                group = [group[i] for i in np.argsort(-sims, kind="stable")]
            self._paired[gid] = group
        for order, via in ((self._paired[gid], "pool"), (self._qrels.get(gid, []), "qrels")):
            found = self._first(order, ident)
            if found is not None:
                return found, via
        for depth in RETRIEVAL_DEPTHS:
            if (gid, depth) not in self._retrieved:
                _, ids = self.index.topk(self.index.vectors([gid]), depth, want)
                self._retrieved[gid, depth] = [int(i) for i in ids[0] if i >= 0]
            found = self._first(self._retrieved[gid, depth], ident)
            if found is not None or depth >= self.index.counts.get(want.value, 0):
                break
        return (found, "retrieval") if found is not None else None

    def _first(self, gids: list[int], ident: QueryIdentity) -> int | None:
        """The first candidate that differs from the query (and is not excluded)."""
        metas = self.index.metas
        return next((g for g in gids if metas[g].did not in ident.excluded and not (
            ident.same_text(metas[g].txt) if metas[g].modality is Modality.TEXT
            else ident.same_image(metas[g].img_path, self.images_root))), None)


def read_qrels_pairs(index: Index, paths: Sequence[str | Path]
                     ) -> tuple[dict[int, list[int]], dict[str, list[str]]]:
    """(candidate global id -> its complements named by the judgements, best known first; qid -> its
    positives) from the query and qrels files in ``paths``, joined with the candidates of ``index``.

    M-BEIR's MSCOCO pool records no pairing: a retrieved caption would be completed with the *nearest*
    image, often another photo. The judgements know the true pairs:

    * task 0 (text -> image): a caption query's positive is the image it describes; the caption
      *candidates* with the query's text (case/space folded) pair with that image;
    * task 3 (image -> text): an image query's positives are its captions; the image *candidates*
      with the query's image path pair with those captions.

    Qrels lines hold only ids, so the query records (M-BEIR query JSONL, whose ``pos_cand_list`` are
    the judgements too) give the query's text or image; qrels files add positives to the queries
    with the same qid. Paths ending in ``.jsonl`` are query files, others qrels files.
    """
    queries: dict[str, Query] = {}
    extra: dict[str, set[str]] = {}
    for p in paths:
        if str(p).endswith(".jsonl"):
            queries.update((q.qid, q) for q in read_queries(p))
        else:
            for qid, dids in read_qrels(p).relevant.items():
                extra.setdefault(qid, set()).update(dids)
    if not queries:
        raise ConfigError("pairs_from needs the M-BEIR query files (.jsonl) of the judgements: qrels lines "
                          "name only ids, the queries give each one's caption or image")
    positives: dict[str, list[str]] = {}
    texts: dict[str, list[str]] = {}  # folded caption -> positive image dids
    images: dict[str, list[str]] = {}  # image path -> positive caption dids
    for qid, q in queries.items():
        positives[qid] = list(dict.fromkeys([*q.pos_cand_list, *sorted(extra.get(qid, ()))]))
        if q.modality is Modality.TEXT and q.txt:
            texts.setdefault(normalise_text(q.txt), []).extend(positives[qid])
        elif q.modality is Modality.IMAGE and q.img_path:
            images.setdefault(os.path.normpath(q.img_path), []).extend(positives[qid])
    complements: dict[int, dict[int, None]] = {}  # gid -> its complements, in order, each once
    metas = index.metas
    for gid, meta in enumerate(metas):
        if meta.modality is Modality.TEXT and meta.txt:
            partners = texts.get(normalise_text(meta.txt), ())
        elif meta.modality is Modality.IMAGE and meta.img_path:
            partners = images.get(os.path.normpath(meta.img_path), ())
        else:
            continue
        for did in partners:
            other = index.gid_of(did)
            if other is None or metas[other].modality is not meta.modality.complement():
                continue
            complements.setdefault(gid, {})[other] = None
            complements.setdefault(other, {})[gid] = None
    return {g: list(found) for g, found in complements.items()}, positives
