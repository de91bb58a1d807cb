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

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.images import ImageLike
from unirag.data.records import Modality, Qrels, Query
from unirag.errors import ConfigError
from unirag.index.store import VectorIndex, check_encoder, parse_modality_filter
from unirag.retrieval.pairing import Completer, QueryIdentity, pair_equals_query
from unirag.retrieval.results import Hits, Pair, RetrievalResult, ScoredCandidate


class Retriever:
    """Top-k candidates and image-caption pairs from an index; see the module docstring.

    ``Retriever(index)`` where ``index`` is an index directory, a :class:`unirag.Index` or a
    :class:`~unirag.index.store.VectorIndex`. :meth:`search` takes an image and/or a text (what a
    notebook has), :meth:`retrieve` M-BEIR query records (what ``unirag retrieve`` reads); both
    follow the same rules and give the same ranking for the same query.

    ``encoder``: an encoder object or spec; None loads the one recorded in the index manifest on
    ``device`` in ``dtype`` ("auto": CUDA when available, in its fast dtype) the first time queries must be encoded (or at
    :meth:`warm_up`). ``pool_images_root`` defaults to the images root the index was built with.
    ``memory``: how an index directory is opened, "mmap" (instant) or "ram" (read into memory: faster
    batched search; see :meth:`unirag.Index.open`).
    """

    def __init__(self, index, encoder=None, *, device: str | None = "auto", dtype: str | None = "auto",
                 verify: bool = False,
                 pool_images_root: str | Path | None = None, memory: str = "mmap") -> None:
        from unirag.index.handle import Index

        if isinstance(index, Index):
            index = index.store
        self.index = index if isinstance(index, VectorIndex) else VectorIndex.open(index, None, verify, memory)
        if isinstance(encoder, str):
            from unirag.encoders.registry import load_encoder

            encoder = load_encoder(encoder, device=device, dtype=dtype)
        if encoder is not None:
            check_encoder(self.index.manifest, encoder, self.index.index_dir)
        self._encoder = encoder
        self.device, self.dtype = device, dtype
        self.verify = verify
        root = pool_images_root or self.index.manifest.get("images_root")
        self.pool_images_root = str(root) if root is not None else None
        self.completer = Completer(self.index, self.pool_images_root)

    @property
    def encoder(self):
        """The query encoder (loaded from the index manifest on first use)."""
        if self._encoder is None:
            from unirag.encoders.registry import load_encoder

            encoder = load_encoder(self.index.manifest["encoder"].get("spec"), device=self.device, dtype=self.dtype)
            check_encoder(self.index.manifest, encoder, self.index.index_dir)
            self._encoder = encoder
        return self._encoder

    def warm_up(self) -> Retriever:
        """Load the query encoder now (otherwise the first search does)."""
        _ = self.encoder
        return self

    # -- images and texts (the Python API) ---------------------------------------------------
    def search(self, image: ImageLike | None = None, text: str | None = None, *, k: int = 5,
               modality: str | Modality | None = "any", exclude: Iterable[str] = (),
               instruction: str | None = None) -> Hits:
        """The top-``k`` hits for one query: an image, a text, or both (the fused query).

        ``image``: a path, a PIL image, encoded bytes or a uint8 array. ``modality``: the candidates
        to search, "any" (default), "text", "image" or "image,text". Over "any", an image query gets
        captions and a text query images (a hit of the other kind is replaced by its complement, as
        ``unirag retrieve`` does). ``exclude``: dids never to return (e.g. the query's own captions).
        Each hit's ``pair`` is the image-caption example it completes to; ``hits.pairs`` are the
        ``k`` examples for a generator (pairs showing the query's own image or text are dropped).
        ``instruction``: for UniIR encoders, the M-BEIR query instruction to prepend, as UniIR does (an
        image query becomes image+text); without one the query is encoded as it is. An image or a
        text alone does not name its dataset and task, so the prompt is not looked up here: take it
        from ``encoder.instructions().instruction_for(query_record)`` (the prompt ``unirag retrieve``
        uses for that record) or from M-BEIR's ``query_instructions.tsv``; or pass the records to
        :meth:`retrieve`.

        ``hit.pair`` is None only when every pair for that candidate would show the query itself
        (see :class:`unirag.Hit`); ``hits.pairs`` holds only pairs.
        """
        return self.search_batch([image], [text], k=k, modality=modality, exclude=[exclude],
                                 instructions=[instruction])[0]

    def search_batch(self, images: Sequence[ImageLike | None] | None = None,
                     texts: Sequence[str | None] | None = None, *, k: int = 5,
                     modality: str | Modality | None = "any",
                     exclude: Sequence[Iterable[str]] | None = None,
                     instructions: str | Sequence[str | None] | None = None) -> list[Hits]:
        """:meth:`search` for many queries at once (encoded in batches): query ``i`` is
        ``images[i]`` and/or ``texts[i]``; ``exclude[i]`` its excluded dids; ``instructions``: one
        UniIR instruction for all queries or one (or None) per query."""
        _check_k(k)
        parse_modality_filter(modality)
        n = len(images) if images is not None else len(texts) if texts is not None else 0
        images = list(images) if images is not None else [None] * n
        texts = list(texts) if texts is not None else [None] * n
        excludes = [set(e) for e in exclude] if exclude is not None else [set()] * n
        if not (len(images) == len(texts) == len(excludes)):
            raise ConfigError(f"search_batch got {len(images)} images, {len(texts)} texts and "
                              f"{len(excludes)} exclude sets; give one of each per query")
        queries = [_query(i, im, tx) for i, (im, tx) in enumerate(zip(images, texts, strict=True))]
        vectors = self._encode(*self._instructed(queries, texts, instructions), images)
        qrels = Qrels({q.qid: e for q, e in zip(queries, excludes, strict=True) if e})
        results = self.retrieve_vectors(queries, vectors, k, modality, exclude_qrels=qrels)
        return [Hits.of(r, self.pool_images_root) for r in results]

    def _instructed(self, queries: list[Query], texts: list, instructions) -> tuple[list[Query], list]:
        """(queries, texts) as the encoder sees them: with each given instruction prepended as UniIR
        does (:meth:`QueryInstructions.apply`); the ranking rules still use the queries as given."""
        n = len(queries)
        given = [instructions] * n if instructions is None or isinstance(instructions, str) else list(instructions)
        if len(given) != n:
            raise ConfigError(f"search_batch got {len(given)} instructions for {n} queries")
        if not any(given):
            return queries, texts
        if not hasattr(self.encoder, "instruct"):
            raise ConfigError(f"instruction= is for UniIR encoders (uniir:...), trained with M-BEIR instructions; "
                              f"{self.index.manifest['encoder'].get('name')!r} takes none")
        from dataclasses import replace

        from unirag.encoders.instructions import prepend_instruction

        out_q, out_t = [], []
        for q, text, prompt in zip(queries, texts, given, strict=True):
            if prompt:
                text = prepend_instruction(prompt, text)
                q = replace(q, txt=text, modality=Modality.IMAGE_TEXT if q.modality.has_image else Modality.TEXT)
            out_q.append(q)
            out_t.append(text)
        return out_q, out_t

    def _encode(self, queries: list[Query], texts: list, images: list) -> np.ndarray:
        from unirag.data.images import as_rgb

        out = np.zeros((len(queries), self.encoder.dim), dtype=np.float32)
        groups: dict[Modality, list[int]] = {}
        for i, q in enumerate(queries):
            groups.setdefault(q.modality, []).append(i)
        for modality, idx in groups.items():
            if modality is Modality.TEXT:
                out[idx] = self.encoder.encode_texts([texts[i] for i in idx])
                continue
            pixels = [as_rgb(images[i]) for i in idx]
            if modality is Modality.IMAGE:
                out[idx] = self.encoder.encode_images(pixels)
            else:
                out[idx] = self.encoder.encode_fused(pixels, [texts[i] for i in idx])
        return out

    def to_dict(self) -> dict[str, Any]:
        """Enough to make the same retriever again with :meth:`from_dict` (index path, encoder, device)."""
        return {"index": str(self.index.index_dir), "encoder": self.index.manifest["encoder"].get("spec"),
                "device": self.device, "dtype": self.dtype, "verify": self.verify, "pool_images_root": self.pool_images_root}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Retriever:
        """A retriever like the one :meth:`to_dict` described (index reopened, encoder loaded by spec)."""
        return cls(data["index"], data.get("encoder"), device=data.get("device", "auto"), dtype=data.get("dtype", "auto"),
                   verify=data.get("verify", False), pool_images_root=data.get("pool_images_root"))

    # -- M-BEIR query records (the CLI) ------------------------------------------------------
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
                    result.pair_of.setdefault(metas[cand].did, len(result.pairs) - 1)
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


def _query(i: int, image: ImageLike | None, text: str | None) -> Query:
    """An in-memory query record; its image path (if it has one) lets pairs that show it be dropped."""
    from unirag.data.images import image_path_of

    if text is not None and not isinstance(text, str):
        raise ConfigError(f"query {i}: text must be a string, got {type(text).__name__}")
    text = text if text and text.strip() else None
    if image is None and text is None:
        raise ConfigError(f"query {i}: give an image, a text, or both")
    modality = Modality.IMAGE_TEXT if image is not None and text else Modality.IMAGE if image is not None \
        else Modality.TEXT
    path = image_path_of(image) if image is not None else None
    return Query(qid=f"query-{i}", modality=modality, txt=text,
                 img_path=str(path.absolute()) if path is not None else None)


def _default_target(query_modality: Modality) -> Modality | None:
    """Over ``any``, a text query expects images and an image query captions (cross-modal tasks)."""
    return query_modality.complement() if query_modality in (Modality.TEXT, Modality.IMAGE) else None


def _check_k(k: int) -> None:
    if not isinstance(k, int | np.integer) or isinstance(k, bool) or k <= 0:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
