"""True image-caption pairs from M-BEIR judgements (``Selection.pairs_from``).

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

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from unirag.data.records import Modality, Query
from unirag.errors import ConfigError
from unirag.retrieval.pairing import normalise_text


class QrelsPairing:
    """Candidate global id -> its complements named by the judgements, best known first."""

    def __init__(self, complements: dict[int, list[int]], positives: dict[str, list[str]]) -> None:
        self._complements = complements
        self._positives = positives

    @classmethod
    def read(cls, index, paths: Sequence[str | Path]) -> QrelsPairing:
        """Join the query and qrels files in ``paths`` with the candidates of ``index``."""
        from unirag.data.mbeir import read_qrels, read_queries

        queries: dict[str, Query] = {}
        extra: dict[str, set[str]] = {}
        for p in paths:
            if str(p).endswith(".jsonl"):
                for q in read_queries(p):
                    queries[q.qid] = q
            else:
                for qid, dids in read_qrels(p).relevant.items():
                    extra.setdefault(qid, set()).update(dids)
        if not queries:
            raise ConfigError("pairs_from needs the M-BEIR query files (.jsonl) of the judgements: qrels lines "
                              "name only ids, the queries give each one's caption or image")
        positives: dict[str, list[str]] = {}
        for qid, q in queries.items():
            positives[qid] = list(dict.fromkeys([*q.pos_cand_list, *sorted(extra.get(qid, ()))]))
        texts: dict[str, list[str]] = {}  # folded caption -> positive image dids
        images: dict[str, list[str]] = {}  # image path -> positive caption dids
        for qid, q in queries.items():
            if q.modality is Modality.TEXT and q.txt:
                texts.setdefault(normalise_text(q.txt), []).extend(positives[qid])
            elif q.modality is Modality.IMAGE and q.img_path:
                images.setdefault(os.path.normpath(q.img_path), []).extend(positives[qid])
        complements: dict[int, list[int]] = {}

        def link(a: int, b: int) -> None:
            complements.setdefault(a, [])
            if b not in complements[a]:
                complements[a].append(b)

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
                link(gid, other)
                link(other, gid)
        return cls(complements, positives)

    def complements(self, gid: int) -> list[int]:
        """The candidates the judgements pair with candidate ``gid`` (empty when they name none)."""
        return self._complements.get(gid, [])

    def positives(self, qid: str) -> list[str]:
        """The positives the files give for query ``qid`` (its reference captions or images)."""
        return self._positives.get(qid, [])

    def __len__(self) -> int:
        return len(self._complements)
