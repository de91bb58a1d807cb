"""Complete a single-modality candidate into an image-caption pair (paper §3.1).

The complement of a candidate is a candidate of the opposite modality that differs from the query
(so the pair cannot reveal the answer). It comes from the pool's own pairing when the pool records
one (candidates sharing a ``source_id``; among several, the one closest to the candidate in the
embedding space first), and otherwise - or when every paired complement equals the query - by
retrieval: the candidate's vector as query, the top hits of the opposite modality, the first
acceptable one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unirag.data.records import Modality, Query, resolve_image
from unirag.index.handle import Index
from unirag.index.store import CandidateMeta

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
    keys = {os.path.normpath(img_path)}
    resolved = resolve_image(img_path, images_root)
    if resolved is not None:
        keys.add(os.path.realpath(resolved))
    return keys


class Completer:
    """Finds complements; per-candidate orders are cached (they do not depend on the query)."""

    def __init__(self, index: Index, images_root: str | Path | None, qrels=None) -> None:
        self.index = index
        self.images_root = images_root
        #: true pairs from M-BEIR judgements (``Selection.pairs_from``), tried after the pool's pairing
        self.qrels = qrels
        self._paired: dict[int, list[int]] = {}
        self._retrieved: dict[tuple[int, int], list[int]] = {}

    def acceptable(self, meta: CandidateMeta, ident: QueryIdentity) -> bool:
        if meta.did in ident.excluded:
            return False
        if meta.modality is Modality.TEXT:
            return not ident.same_text(meta.txt)
        return not ident.same_image(meta.img_path, self.images_root)

    def complement(self, gid: int, ident: QueryIdentity) -> tuple[int, str] | None:
        """(global id, "pool" | "qrels" | "retrieval") of the complement of candidate ``gid``, or None."""
        meta = self.index.metas[gid]
        found = self._first(self._paired_order(gid), ident)
        if found is not None:
            return found, "pool"
        if self.qrels is not None:
            found = self._first(self.qrels.complements(gid), ident)
            if found is not None:
                return found, "qrels"
        for depth in RETRIEVAL_DEPTHS:
            found = self._first(self._retrieved_order(gid, depth), ident)
            if found is not None or depth >= self.index.counts.get(meta.modality.complement().value, 0):
                break
        return (found, "retrieval") if found is not None else None

    def _first(self, gids: list[int], ident: QueryIdentity) -> int | None:
        for g in gids:
            if self.acceptable(self.index.metas[g], ident):
                return g
        return None

    def _paired_order(self, gid: int) -> list[int]:
        if gid not in self._paired:
            meta = self.index.metas[gid]
            want = meta.modality.complement()
            group = [g for g in self.index.source_group(meta.source_id) if self.index.metas[g].modality is want]
            if len(group) > 1:
                sims = self.index.vectors(group) @ self.index.vectors([gid])[0]
                group = [group[i] for i in np.argsort(-sims, kind="stable")]
            self._paired[gid] = group
        return self._paired[gid]

    def _retrieved_order(self, gid: int, depth: int) -> list[int]:
        key = (gid, depth)
        if key not in self._retrieved:
            want = self.index.metas[gid].modality.complement()
            _, ids = self.index.topk(self.index.vectors([gid]), depth, want)
            self._retrieved[key] = [int(i) for i in ids[0] if i >= 0]
        return self._retrieved[key]


def pair_equals_query(image_meta: CandidateMeta, text_meta: CandidateMeta, ident: QueryIdentity,
                      images_root: str | Path | None) -> bool:
    """A pair whose caption is the query's text or whose image is the query's image is dropped."""
    return ident.same_text(text_meta.txt) or ident.same_image(image_meta.img_path, images_root)

