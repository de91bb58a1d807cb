"""Retrieve top-k candidates and image-caption pairs for queries (paper §3.1 and §5).

For each query the index is searched (restricted to one candidate modality, or over all). Walking
the hits in rank order:

* a query's own positives are skipped when ``exclude_qrels`` is given (leakage-free evaluation);
* a hit of the wrong modality (a caption for a text->image query searched over ``any``) is replaced
  by its complement, as the paper does when scoring UniIR's mixed-modality results (§5);
* every single-modality hit is completed into a pair (see :mod:`unirag.retrieval.pairing`);
  pairs that contain the query's text or image are dropped. Each candidate gets at most one pair
  (so a text->image run never shows the same image twice); when a candidate's pair is dropped, a
  later hit that maps to the same candidate may supply another one.

The search over-fetches and widens until ``k`` candidates and ``k`` pairs are found or the index
is exhausted, so dropped hits do not shorten the lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unirag.data.records import Modality, Qrels, Query
from unirag.errors import ConfigError
from unirag.index.store import VectorIndex, check_encoder, parse_modality_filter
from unirag.retrieval.pairing import Completer, QueryIdentity, pair_equals_query
from unirag.retrieval.results import Pair, RetrievalResult, ScoredCandidate


class Retriever:
    """``Retriever(index_dir).retrieve(queries, k, modality)``; see the module docstring.

    ``encoder=None`` loads the encoder recorded in the index manifest when queries must be encoded.
    ``pool_images_root`` defaults to the images root the index was built with.
    """

    def __init__(self, index: str | Path | VectorIndex, encoder=None, *, verify: bool = False,
                 pool_images_root: str | Path | None = None) -> None:
        self.index = index if isinstance(index, VectorIndex) else VectorIndex.open(index, encoder, verify)
        if encoder is not None and isinstance(index, VectorIndex):
            check_encoder(self.index.manifest, encoder, self.index.index_dir)
        self._encoder = encoder
        self.pool_images_root = pool_images_root or self.index.manifest.get("images_root")
        self.completer = Completer(self.index, self.pool_images_root)

    @property
    def encoder(self):
        if self._encoder is None:
            from unirag.encoders.registry import load_encoder

            encoder = load_encoder(self.index.manifest["encoder"].get("spec"))
            check_encoder(self.index.manifest, encoder, self.index.index_dir)
            self._encoder = encoder
        return self._encoder

    def retrieve(self, queries: Sequence[Query], k: int, modality: str | Modality | None = "any",
                 exclude_qrels: Qrels | None = None, query_images_root: str | Path | None = None,
                 progress: bool = False) -> list[RetrievalResult]:
        """Encode ``queries`` and retrieve; one :class:`RetrievalResult` per query, in order."""
        _check_k(k)
        parse_modality_filter(modality)
        vectors = self.encoder.encode_records(list(queries), query_images_root, progress=progress)
        return self.retrieve_vectors(queries, vectors, k, modality, exclude_qrels, query_images_root, progress)

    def retrieve_vectors(self, queries: Sequence[Query], vectors: np.ndarray, k: int,
                         modality: str | Modality | None = "any", exclude_qrels: Qrels | None = None,
                         query_images_root: str | Path | None = None,
                         progress: bool = False) -> list[RetrievalResult]:
        """Retrieve with already-encoded query vectors (row i belongs to ``queries[i]``)."""
        from tqdm.auto import tqdm

        _check_k(k)
        wanted = parse_modality_filter(modality)
        if len(vectors) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(vectors)} vectors")
        if not queries:
            return []
        scope = self.index.counts.get(wanted.value, 0) if wanted is not None else len(self.index)
        excluded = [exclude_qrels.get(q.qid) if exclude_qrels is not None else set() for q in queries]
        fetch = max(1, min(scope, 2 * k + 10 + max(len(e) for e in excluded)))
        scores, ids = self.index.search(vectors, fetch, wanted)
        results = []
        for i, query in enumerate(tqdm(queries, desc="pairs", unit="query", disable=not progress)):
            ident = QueryIdentity.of(query, query_images_root, excluded[i])
            target = wanted if wanted is not None else _default_target(query.modality)
            depth, row_scores, row_ids = fetch, scores[i], ids[i]
            while True:
                result, complete = self._assemble(query.qid, ident, target, row_scores, row_ids, k)
                if complete or depth >= scope:
                    break
                depth = min(scope, depth * 4)
                s, g = self.index.search(vectors[i : i + 1], depth, wanted)
                row_scores, row_ids = s[0], g[0]
            results.append(result)
        return results

    def _assemble(self, qid: str, ident: QueryIdentity, target: Modality | None, scores: np.ndarray,
                  ids: np.ndarray, k: int) -> tuple[RetrievalResult, bool]:
        metas = self.index.metas
        result = RetrievalResult(qid)
        seen_cands: set[int] = set()
        paired: set[int] = set()  # candidates that already have their (one) pair
        for score, gid in zip(scores.tolist(), ids.tolist(), strict=True):
            if gid < 0:
                break
            meta = metas[gid]
            if meta.did in ident.excluded:
                continue
            fused = meta.modality is Modality.IMAGE_TEXT
            if not fused and target in (Modality.TEXT, Modality.IMAGE) and meta.modality is not target:
                found = self.completer.complement(gid, ident)  # §5: use the complement of the right modality
                if found is None:
                    continue
                cand, other, via, replaced = found[0], gid, found[1], meta.did
            else:
                cand, replaced = gid, None
                if fused:
                    other, via = gid, "fused"
                else:
                    found = self.completer.complement(gid, ident)
                    other, via = found if found is not None else (None, None)
            if cand not in seen_cands and len(result.candidates) < k:
                seen_cands.add(cand)
                result.candidates.append(ScoredCandidate(metas[cand].did, score, metas[cand].modality.value,
                                                         replaced))
            if other is not None and cand not in paired and len(result.pairs) < k:
                if self._add_pair(result, cand, other, score, via, ident):
                    paired.add(cand)
            if len(result.candidates) >= k and len(result.pairs) >= k:
                return result, True
        return result, False

    def _add_pair(self, result: RetrievalResult, cand: int, other: int, score: float, via: str,
                  ident: QueryIdentity) -> bool:
        """Append the pair (cand, other) unless it shows the query; True if appended."""
        metas = self.index.metas
        image, text = (cand, other) if metas[cand].modality.has_image else (other, cand)
        if pair_equals_query(metas[image], metas[text], ident, self.pool_images_root):
            return False
        result.pairs.append(Pair(metas[image].did, metas[text].did, metas[image].img_path, metas[text].txt,
                                 score, via))
        return True


def _default_target(query_modality: Modality) -> Modality | None:
    """Over ``any``, a text query expects images and an image query captions (cross-modal tasks)."""
    return query_modality.complement() if query_modality in (Modality.TEXT, Modality.IMAGE) else None


def _check_k(k: int) -> None:
    if not isinstance(k, int | np.integer) or isinstance(k, bool) or k <= 0:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
