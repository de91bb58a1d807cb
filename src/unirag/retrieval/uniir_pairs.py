"""Pair completion and few-shot pairs the way the official code makes them (``--profile official``).

Two settings of :mod:`unirag.profiles` select this module:

* ``pair_completion = uniir`` - :class:`UniIRCompleter`. UniIR (TIGER-AI-Lab/UniIR
  ``src/common/mbeir_retriever.py`` at commit 72871c19, ``get_raw_retrieved_candidates``, lines
  235-304) completes every retrieved text or image candidate by *re-encoding it as a query* through
  ``InteractiveRetriever`` (``src/common/interactive_retriever.py`` at commit 1104db5c): the dataset
  id is hard-coded to MSCOCO's (9, line 40), a text becomes a task-0 (text->image) query and an image
  a task-3 (image->text) query (lines 84, 93), so the MSCOCO instruction is prepended whatever the
  candidate's dataset (Fashion200k too). The index is searched for its top 10 (all modalities, line
  277) and the first hit of the opposite modality (line 288) with an image path that differs from the
  *original query's*, else with a text that differs from it (lines 290-298), is the complement; none
  in the top 10 means no pair. The comparison is UniIR's: exact strings, no normalisation.
* ``example_pairs = per-hit`` - :func:`per_hit_pairs`. UniRAG's example provider (castorini/UniRAG
  ``src/unirag/incontext_example_provider.py`` at commit 07190083, ``get_candidates``, lines 10-45)
  turns each retrieved candidate into one pair with its complement - an image may appear in several
  pairs - drops a pair whose caption is the query's text or whose image is the query's image (lines
  36-43), and the generator takes the first k (``generator_prompt.py`` at commit 07190083:
  ``min(self.k, len(retrieval_results))``, lines 20, 60, 100). The hits it reads are every candidate
  UniIR's raw retrieval saved: as many as the largest Recall@k of the dataset's metrics (10 for
  MSCOCO, 50 for Fashion200k; see :data:`UNIRAG_DEPTH`).

Kept apart from :mod:`unirag.retrieval.pairing` (the paper's completion) so each can change alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from unirag.data.records import Candidate, Modality, Query
from unirag.index.handle import Index
from unirag.retrieval.pairing import Completer

#: UniIR's complement search depth (``complement_retriever.retrieve(k=10)``) and UniRAG's retrieval depth.
UNIIR_DEPTH = 10
#: UniRAG's retrieval depth per M-BEIR dataset id, where it is not :data:`UNIIR_DEPTH`. UniIR's
#: ``run_retrieval`` searches ``k = max`` of the dataset's Recall@k metrics (TIGER-AI-Lab/UniIR
#: ``src/common/mbeir_retriever.py`` at commit 72871c19 :412) and saves all k hits as the raw candidates
#: (:441-465); UniRAG's config lists Recall@1/5/10 for MSCOCO and Recall@10/20/50 for Fashion200k
#: (``src/models/uniir_clip/clip_scorefusion/configs_scripts/large/eval/unirag/retrieval.yaml`` at commit
#: 98dc570c, :39-40 and :45-46), and castorini/UniRAG ``get_candidates`` reads every saved hit.
UNIRAG_DEPTH = {"1": 50}


def unirag_depth(qid: str) -> int:
    """How many hits UniRAG's example provider reads for a query: 50 for Fashion200k (M-BEIR dataset 1), else 10."""
    from unirag.encoders.instructions import dataset_key

    return UNIRAG_DEPTH.get(dataset_key(qid) or "", UNIIR_DEPTH)


#: The M-BEIR dataset id InteractiveRetriever hard-codes (MSCOCO) and the task per candidate modality.
MSCOCO_ID = "9"
COMPLEMENT_TASK = {Modality.TEXT: 0, Modality.IMAGE: 3}


def uniir_accepts(meta: Candidate, query_txt: str | None, query_img_path: str | None) -> bool:
    """UniIR's test (TIGER-AI-Lab/UniIR ``src/common/mbeir_retriever.py`` at commit 72871c19, :290-298):
    a candidate with an image path that differs from the query's is accepted; otherwise (no image path,
    or the query's own) one with a text that differs from the query's text is. Exact strings; a missing
    query field never equals. An image-modality hit showing the query's own image is thus still taken
    when it carries a text of its own that differs from the query's."""
    if meta.img_path and meta.img_path != query_img_path:
        return True
    return bool(meta.txt) and meta.txt != query_txt


class UniIRCompleter(Completer):
    """:class:`~unirag.retrieval.pairing.Completer`'s ``complement(gid, ident)``, UniIR's way.

    ``encoder``: a callable returning the query encoder (loaded on first use). Each candidate's top 10
    is searched once and cached (it does not depend on the query; the choice among them does).
    """

    def __init__(self, index: Index, encoder: Callable[[], Any], images_root: str | Path | None) -> None:
        super().__init__(index, images_root)
        self._encoder = encoder
        self._top: dict[int, list[int]] = {}

    def prepare(self, gids: Iterable[int]) -> None:
        """Encode and search the candidates not seen yet, in one batch, each as the instructed query UniIR
        builds from a candidate: MSCOCO's dataset id, task 0 (text) or 3 (image)."""
        metas = self.index.metas
        todo = list(dict.fromkeys(g for g in map(int, gids)
                                  if g >= 0 and g not in self._top and metas[g].modality in COMPLEMENT_TASK))
        if not todo:
            return
        queries = [Query(qid=f"{MSCOCO_ID}:{len(self._top) + i + 1}", modality=metas[g].modality,
                         txt=metas[g].txt if metas[g].modality is Modality.TEXT else None,
                         img_path=metas[g].img_path if metas[g].modality is Modality.IMAGE else None,
                         task_id=COMPLEMENT_TASK[metas[g].modality]) for i, g in enumerate(todo)]
        vectors = self._encoder().encode_records(queries, self.images_root)
        _, ids = self.index.topk(vectors, min(UNIIR_DEPTH, len(self.index)), None)
        self._top.update((g, [int(i) for i in row if i >= 0]) for g, row in zip(todo, ids, strict=True))

    def complement(self, gid: int, ident: Any) -> tuple[int, str] | None:
        meta = self.index.metas[gid]
        if meta.modality not in COMPLEMENT_TASK:
            return None
        self.prepare([gid])
        want, metas = meta.modality.complement(), self.index.metas
        return next(((g, "uniir") for g in self._top[gid] if metas[g].modality is want and metas[g].did not in
                     ident.excluded and uniir_accepts(metas[g], ident.raw_text, ident.raw_image)), None)


def per_hit_pairs(index: Index, completer: Any, ident: Any, ids: Iterable[int], scores: Iterable[float],
                  k: int, depth: int = UNIIR_DEPTH, zip_bug: bool = False
                  ) -> tuple[list[tuple[int, int, float, str]], int]:
    """UniRAG's example pairs: (image gid, text gid, score, via) for each of the first
    ``max(depth, k)`` hits (excluded dids skipped; ``depth``: :func:`unirag_depth` of the query), first
    ``k`` kept; and how many hits were read.

    ``zip_bug`` (``pair_alignment = uniir-zip``): the pairs as the official code really builds them. UniIR
    computes complements for the text and image hits only (TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py
    @98dc570:264-278, :289-308) and UniRAG zips that shorter list against *all* hits (castorini/UniRAG
    src/unirag/incontext_example_provider.py@07190083:11-13): after an image+text hit every later hit is
    given the complement of the hit after it, and the last hits (one per image+text hit) are dropped."""
    out: list[tuple[int, int, float, str]] = []
    depth = max(depth, k)
    hits: list[tuple[int, float]] = []
    for gid, score in zip(ids, scores, strict=False):
        gid = int(gid)
        if gid < 0 or len(hits) >= depth:
            break
        if index.metas[gid].did not in ident.excluded:
            hits.append((gid, float(score)))
    complements = None
    if zip_bug:  # one entry per text or image hit, in hit order (None: none found), zipped against every hit
        complements = [completer.complement(g, ident) for g, _ in hits
                       if index.metas[g].modality is not Modality.IMAGE_TEXT]
        hits = hits[: len(complements)]
    for n, (gid, score) in enumerate(hits):
        meta = index.metas[gid]
        if meta.modality is Modality.IMAGE_TEXT:
            image, text, via = gid, gid, "fused"
        else:
            found = complements[n] if complements is not None else completer.complement(gid, ident)
            if found is None:
                continue  # "Failed to find image text pairs": the official provider skips the hit
            other, via = found
            image, text = (gid, other) if meta.modality is Modality.IMAGE else (other, gid)
        txt, img = index.metas[text].txt, index.metas[image].img_path
        if not txt or not img or (ident.raw_text is not None and txt == ident.raw_text) or \
                (ident.raw_image is not None and img == ident.raw_image):
            continue
        if len(out) < k:
            out.append((image, text, float(score), via))
    return out, len(hits)
