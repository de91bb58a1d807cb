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

Each result also keeps ``raw``: the first ``k`` index hits as retrieved (before any replacement),
which UniIR's Recall@k scores. Two settings of :mod:`unirag.profiles` choose the official code's
behaviour instead (``profile="official"``): ``pair_completion = uniir`` and ``example_pairs =
per-hit`` (see :mod:`unirag.retrieval.uniir_pairs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.images import ImageLike, check_image_like, image_path_of, load_rgb
from unirag.data.records import Modality, Qrels, Query, resolve_image
from unirag.errors import ConfigError, InputError
from unirag.index.handle import Index
from unirag.index.store import check_encoder, parse_modality_filter
from unirag.profiles import Settings, resolve
from unirag.retrieval.near_duplicates import caption_words, dhash, hash_of
from unirag.retrieval.pairing import Completer, QueryIdentity
from unirag.retrieval.results import Hit, Hits, Pair
from unirag.retrieval.selection import Offer, PairPicker, QueryEvidence, Selection
from unirag.retrieval.uniir_pairs import UniIRCompleter, per_hit_pairs, unirag_depth


class Retriever:
    """Top-k candidates and image-caption pairs from an index; see the module docstring.

    ``Retriever(index)`` where ``index`` is an index directory, a :class:`unirag.Index` or a
    :class:`~unirag.Index`. :meth:`search` takes an image and/or a text (what a
    notebook has), :meth:`retrieve` M-BEIR query records (what ``unirag retrieve`` reads); both
    follow the same rules and give the same ranking for the same query.

    ``encoder``: an encoder object; a spec, or None for the one recorded in the index manifest, loads on
    ``device`` in ``dtype`` ("auto": CUDA when available, in its fast dtype) the first time queries must be encoded (or at
    :meth:`warm_up`). ``pool_images_root`` defaults to the images root the index was built with.
    ``profile``: a profile name or :class:`unirag.profiles.Settings`; its ``pair_completion`` and
    ``example_pairs`` settings say how pairs are made (``"official"``: as UniIR and UniRAG's code).
    ``memory``: how an index directory is opened, "mmap" (instant) or "ram" (read into memory: faster
    batched search; see :meth:`unirag.Index.open`).
    """

    def __init__(self, index, encoder=None, *, device: str | None = "auto", dtype: str | None = "auto",
                 verify: bool = False,
                 pool_images_root: str | Path | None = None, profile: Any = None, memory: str = "mmap") -> None:
        if not isinstance(index, Index | str | Path):
            raise InputError(f"expected an index directory (str or Path) or a unirag.Index, got "
                             f"{'None' if index is None else type(index).__name__}", field="index")
        self.index = index if isinstance(index, Index) else Index.open(index, verify=verify, memory=memory)
        if encoder is not None and not isinstance(encoder, str):
            check_encoder(self.index.manifest, encoder, self.index.path)
        self._encoder = encoder
        self.device, self.dtype = device, dtype
        self.verify = verify
        root = pool_images_root or self.index.manifest.get("images_root")
        self.pool_images_root = str(root) if root is not None else None
        self.settings = resolve(profile)
        self._completers: dict[tuple[str, ...], Completer] = {
            (): UniIRCompleter(self.index, lambda: self.encoder, self.pool_images_root)
            if self.settings["pair_completion"] == "uniir" else Completer(self.index, self.pool_images_root)}
        self.per_hit = self.settings["example_pairs"] == "per-hit"

    @property
    def encoder(self):
        """The query encoder (loaded by the spec given, else the index manifest's, on first use)."""
        if self._encoder is None or isinstance(self._encoder, str):
            from unirag.encoders.registry import load_encoder, precision_options

            spec = self._encoder or self.index.manifest["encoder"].get("spec")
            encoder = load_encoder(spec, device=self.device, **precision_options(spec, self.dtype, self.settings))
            check_encoder(self.index.manifest, encoder, self.index.path)
            self._encoder = encoder
        return self._encoder

    def warm_up(self) -> Retriever:
        """Load the query encoder now (otherwise the first search does)."""
        _ = self.encoder
        return self

    # -- images and texts (the Python API) ---------------------------------------------------
    def search(self, image: ImageLike | None = None, text: str | None = None, *, k: int = 5,
               modality: str | Modality | None = "any", exclude: Iterable[str] = (),
               instruction: str | None = None, selection: Selection | Mapping[str, Any] | None = None,
               references: Iterable[str] = (), **options: Any) -> Hits:
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

        Example selection (:class:`unirag.Selection`; ``selection=`` or its fields as keywords):
        ``diversity="mmr"`` with ``mmr_lambda=0.7``, ``one_per_image=True``, ``near_duplicates="off" |
        "report" | "exclude"`` (with ``image_hash=``, ``image_cosine=``, ``caption=`` thresholds),
        ``pairs_from=[query/qrels files]``, ``where={"dataset": "mscoco"}`` (searched within).
        ``references``: captions the examples must not copy (the query's ground truth), for the guard.
        """
        return self.search_batch([image], [text], k=k, modality=modality, exclude=[exclude],
                                 instructions=[instruction], selection=selection, references=[references],
                                 **options)[0]

    def search_batch(self, images: Sequence[ImageLike | None] | None = None,
                     texts: Sequence[str | None] | None = None, *, k: int = 5,
                     modality: str | Modality | None = "any",
                     exclude: Sequence[Iterable[str]] | None = None,
                     instructions: str | Sequence[str | None] | None = None,
                     selection: Selection | Mapping[str, Any] | None = None,
                     references: Sequence[Iterable[str]] | None = None, **options: Any) -> list[Hits]:
        """:meth:`search` for many queries at once (encoded in batches): query ``i`` is
        ``images[i]`` and/or ``texts[i]``; ``exclude[i]`` its excluded dids; ``instructions``: one
        UniIR instruction for all queries or one (or None) per query; ``references[i]`` its
        reference captions; ``selection`` / selection keywords as in :meth:`search`, for all."""
        _, sel = check_options(k, modality, selection, **options)
        n = len(images) if images is not None else len(texts) if texts is not None else 0
        per_query = {"images": images, "texts": texts, "exclude sets": exclude, "reference lists": references,
                     "instructions": None if instructions is None or isinstance(instructions, str) else instructions}
        wrong = [f"{len(v)} {name}" for name, v in per_query.items() if v is not None and len(v) != n]
        if wrong:
            raise ConfigError(f"search_batch got {', '.join(wrong)} for {n} queries; give one of each per query")
        images = list(images) if images is not None else [None] * n
        texts = list(texts) if texts is not None else [None] * n
        excludes = [set(e) for e in exclude] if exclude is not None else [set()] * n
        queries = [_query(i, im, tx) for i, (im, tx) in enumerate(zip(images, texts, strict=True))]
        # encoded with each given instruction prepended as UniIR does (:meth:`QueryInstructions.apply`); the
        # ranking rules still use the queries as given
        given = [instructions] * n if instructions is None or isinstance(instructions, str) else list(instructions)
        encoded = queries
        if any(given):
            if not hasattr(self.encoder, "instruct"):
                raise ConfigError(f"instruction= is for UniIR encoders (uniir:...), trained with M-BEIR instructions; "
                                  f"{self.index.manifest['encoder'].get('name')!r} takes none")
            from unirag.encoders.instructions import prepend_instruction

            encoded = [replace(q, txt=prepend_instruction(prompt, q.txt),
                               modality=Modality.IMAGE_TEXT if q.modality.has_image else Modality.TEXT) if prompt else q
                       for q, prompt in zip(queries, given, strict=True)]
        vectors = np.zeros((n, self.encoder.dim), dtype=np.float32)
        groups: dict[Modality, list[int]] = {}
        for i, q in enumerate(encoded):
            groups.setdefault(q.modality, []).append(i)
        for group, idx in groups.items():
            if group is Modality.TEXT:
                vectors[idx] = self.encoder.encode_texts([encoded[i].txt for i in idx])
                continue
            pixels = [load_rgb(images[i]) for i in idx]
            if group is Modality.IMAGE:
                vectors[idx] = self.encoder.encode_images(pixels)
            else:
                vectors[idx] = self.encoder.encode_fused(pixels, [encoded[i].txt for i in idx])
        qrels = Qrels({q.qid: e for q, e in zip(queries, excludes, strict=True) if e})
        return self.retrieve_vectors(queries, vectors, k, modality, exclude_qrels=qrels, selection=sel,
                                     query_images=images, references=references)

    def to_dict(self) -> dict[str, Any]:
        """Enough to make the same retriever again with :meth:`from_dict` (index path, encoder, device)."""
        return {"index": str(self.index.path), "encoder": self.index.manifest["encoder"].get("spec"),
                "device": self.device, "dtype": self.dtype, "verify": self.verify, "pool_images_root": self.pool_images_root,
                "profile": self.settings.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Retriever:
        """A retriever like the one :meth:`to_dict` described (index reopened, encoder loaded by spec)."""
        profile = data.get("profile")
        return cls(**{**data, "profile": Settings.from_dict(profile) if isinstance(profile, dict) else profile})

    # -- M-BEIR query records (the CLI) ------------------------------------------------------
    def retrieve(self, queries: Sequence[Query], k: int, modality: str | Modality | None = "any",
                 exclude_qrels: Qrels | None = None, query_images_root: str | Path | None = None,
                 progress: bool = False, *, selection: Selection | Mapping[str, Any] | None = None
                 ) -> list[Hits]:
        """Encode ``queries`` and retrieve; one :class:`~unirag.Hits` per query, in order.
        ``selection``: how pairs become examples (:class:`unirag.Selection`)."""
        _, sel = check_options(k, modality, selection)
        vectors = self.encoder.encode_records(list(queries), query_images_root, progress=progress)
        return self.retrieve_vectors(queries, vectors, k, modality, exclude_qrels, query_images_root, progress,
                                     selection=sel)

    def retrieve_vectors(self, queries: Sequence[Query], vectors: np.ndarray, k: int,
                         modality: str | Modality | None = "any", exclude_qrels: Qrels | None = None,
                         query_images_root: str | Path | None = None,
                         progress: bool = False, *, selection: Selection | Mapping[str, Any] | None = None,
                         query_images: Sequence[ImageLike | None] | None = None,
                         references: Sequence[Iterable[str]] | None = None) -> list[Hits]:
        """Retrieve with already-encoded query vectors (row i belongs to ``queries[i]``).

        ``selection``: how pairs become examples (:class:`~unirag.retrieval.selection.Selection`);
        ``query_images``: the query images themselves when they are not files (for the
        near-duplicate guard); ``references``: per query, captions its examples must not copy
        (besides the texts of its excluded positives)."""
        from tqdm.auto import tqdm

        wanted, sel = check_options(k, modality, selection)
        if self.per_hit and (sel.diversity != "none" or sel.one_per_image or sel.near_duplicates == "exclude"):
            raise ConfigError("example_pairs = per-hit keeps UniRAG's pairs as its code makes them; --set diversity, "
                              "--set one_per_image=on and --set near_duplicates=exclude choose among pairs and need "
                              "--set example_pairs=per-candidate")
        if len(vectors) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(vectors)} vectors")
        if not queries:
            return []
        where = dict(sel.where) or None
        scope = self.index.scope(wanted, where)
        if where and scope < k:
            import warnings

            shown = " ".join(f"{f}={','.join(v)}" for f, v in sel.where)
            among = f" {wanted.value}" if wanted is not None else ""
            warnings.warn(f"the filter {shown} matches {scope}{among} candidate(s), fewer than k={k}: each query gets "
                          f"at most {scope} example(s)", UserWarning, stacklevel=2)
        excluded = [exclude_qrels.get(q.qid) if exclude_qrels is not None else set() for q in queries]
        if sel.pairs_from not in self._completers:  # one per pairs_from set, kept: its caches are per index
            self._completers[sel.pairs_from] = Completer(self.index, self.pool_images_root, pairs_from=sel.pairs_from)
        completer = self._completers[sel.pairs_from]
        fetch = max(1, min(scope, 2 * sel.pool_size(k) + 10 + max(len(e) for e in excluded)))
        # over ``any`` a text query expects images and an image query captions (cross-modal tasks)
        targets = [wanted if wanted is not None else q.modality.complement()
                   if q.modality in (Modality.TEXT, Modality.IMAGE) else None for q in queries]
        if wanted is None:
            fetch = cross_modal_depth(self.index, fetch, scope, {t for t in targets if t is not None}, where)
        if self.per_hit:  # UniRAG reads 10 hits (50 for Fashion200k) per query
            read = max(unirag_depth(q.qid) for q in queries)
            fetch = max(fetch, min(scope, read + max(len(e) for e in excluded)))
        if scope == 0:
            return [Hits(qid=q.qid, near_duplicates=PairPicker(sel, k, QueryEvidence(), None).report())
                    for q in queries]
        scores, ids = self.index.topk(vectors, fetch, wanted, where)
        if hasattr(completer, "prepare"):  # UniIR completion: encode the hits' complement queries in one batch
            completer.prepare(g for g in ids.ravel().tolist() if g >= 0)
        state = []
        for i, query in enumerate(queries):
            ident = QueryIdentity.of(query, query_images_root, excluded[i])
            evidence = self._evidence(sel, query, vectors[i], query_images_root,
                                      query_images[i] if query_images is not None else None,
                                      [*excluded[i], *query.pos_cand_list, *completer.positives.get(query.qid, ())],
                                      references[i] if references is not None else ())
            state.append((ident, targets[i], evidence))
        results: list[Hits] = [None] * len(queries)  # type: ignore[list-item]
        metas = self.index.metas
        rows = {i: (scores[i], ids[i]) for i in range(len(queries))}
        pending, depth = list(range(len(queries))), fetch
        bar = tqdm(total=len(queries), desc="pairs", unit="query", disable=not progress)
        while pending:
            again = []  # queries whose candidates ran out before k hits and pairs: searched 4x deeper, together
            for i in pending:
                ident, target, evidence = state[i]
                row_scores, row_ids = rows[i]
                picker = PairPicker(sel, k, evidence, self.index.vectors)
                # per-hit: the hits only here; the official per-hit pairs are made below (no selection there)
                result, complete = self._assemble(queries[i].qid, ident, target, row_scores, row_ids, k,
                                                  None if self.per_hit else picker, completer)
                if not complete and depth < scope:
                    again.append(i)
                    continue
                if self.per_hit:  # UniRAG's pairs; the picker sees each only for the near-duplicate report
                    found, _ = per_hit_pairs(self.index, completer, ident, row_ids.tolist(), row_scores.tolist(), k,
                                             unirag_depth(result.qid), self.settings["pair_alignment"] == "uniir-zip")
                    self._set_pairs(result, [((metas[j].did, metas[t].did), self._offer(picker, j, j, t, s, via)[1])
                                             for j, t, s, via in found])
                else:
                    self._set_pairs(result, [((o.cand_did,), o.pair) for o in picker.finish()])
                result.near_duplicates = picker.report()
                results[i] = result
                bar.update()
            depth = min(scope, depth * 4)
            # One FAISS call per 16 queries: FAISS scores fewer than 20 queries with its own loop and more
            # with BLAS, whose sums can differ in the last bit, and a deeper search must not move the scores
            # of the hits already seen (it did not when each query was searched again on its own).
            for start in range(0, len(again), 16):
                part = again[start : start + 16]
                s, g = self.index.topk(vectors[part], depth, wanted, where)
                rows.update({i: (s[j], g[j]) for j, i in enumerate(part)})
            pending = again
        bar.close()
        return results

    def _evidence(self, sel: Selection, query: Query, vector: np.ndarray, query_images_root, image,
                  positives: Iterable[str], references: Iterable[str]) -> QueryEvidence:
        """What the near-duplicate guard compares this query's examples with."""
        ev = QueryEvidence()
        if sel.near_duplicates == "off":
            return ev
        if query.modality.has_image:
            if image is not None and not isinstance(image, str | Path):
                with contextlib.suppress(OSError, ValueError, ConfigError):  # unreadable: no hash
                    ev.image_hash = dhash(image)
            else:
                path = image if image is not None else resolve_image(query.img_path, query_images_root)
                ev.image_hash = hash_of(path)
        if query.modality is Modality.IMAGE:
            ev.image_vector = np.asarray(vector, dtype=np.float32)
        texts = [str(t) for t in references if t]
        if query.modality is Modality.TEXT and query.txt:
            texts.append(query.txt)  # a caption query: an example caption copying it shows the answer's pair
        metas = self.index.metas
        texts += [metas[g].txt for g in map(self.index.gid_of, positives) if g is not None and metas[g].txt]
        ev.references = [w for w in dict.fromkeys(caption_words(t) for t in texts) if w]
        return ev

    def _assemble(self, qid: str, ident: QueryIdentity, target: Modality | None, scores: np.ndarray,
                  ids: np.ndarray, k: int, picker: PairPicker | None, completer: Completer
                  ) -> tuple[Hits, bool]:
        metas = self.index.metas
        result = Hits(qid=qid)
        dids = (metas[g].did for g in ids.tolist() if g >= 0)
        result.raw = list(islice((d for d in dids if d not in ident.excluded), k))  # not the whole fetch
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
                found = completer.complement(gid, ident)  # §5: use the complement of the right modality
                if found is None:
                    continue
                cand, other, via, replaced = found[0], gid, found[1], meta.did
            else:
                cand, other, via, replaced = gid, None, None, None
            if cand not in seen_cands and len(result) < k:
                seen_cands.add(cand)
                result.append(Hit(metas[cand].did, score, metas[cand].modality.value, replaced=replaced))
            if picker is not None and cand not in paired and picker.wants_more():
                if other is None:  # completed only when a pair is still wanted
                    other, via = (gid, "fused") if fused else completer.complement(gid, ident) or (None, None)
                if other is not None:  # not offered when the caption is the query's text or the image its image
                    image, text = (cand, other) if metas[cand].modality.has_image else (other, cand)
                    if not (ident.same_text(metas[text].txt) or ident.same_image(metas[image].img_path,
                                                                                  self.pool_images_root)) \
                            and self._offer(picker, cand, image, text, score, via)[0]:
                        paired.add(cand)
            if len(result) >= k and (picker is None or not picker.wants_more()):
                return result, True
        return result, False

    def _offer(self, picker: PairPicker, cand: int, image: int, text: int, score: float, via: str
               ) -> tuple[bool, Pair]:
        """Offer the pair of ``image`` and ``text`` (global ids), standing for candidate ``cand``, to the picker,
        with its image file read against the pool's root: (True if taken, the pair)."""
        metas = self.index.metas
        pair = Pair(metas[image].did, metas[text].did, metas[image].img_path, metas[text].txt, score, via,
                    images_root=self.pool_images_root)
        file = resolve_image(pair.img_path, self.pool_images_root)
        return picker.offer(Offer(metas[cand].did, pair, image, str(file) if file is not None else None)), pair

    def _set_pairs(self, result: Hits, pairs: list[tuple[tuple[str, ...], Pair]]) -> None:
        """Put the chosen pairs into the result in example order, each on the hits of the candidate dids it
        stands for."""
        result.pairs = [p for _, p in pairs]
        pair_of = {did: pair for dids, pair in reversed(pairs) for did in dids}  # a did keeps its first pair
        result[:] = [replace(h, pair=pair_of.get(h.did)) for h in result]


def cross_modal_depth(index: Index, fetch: int, scope: int, targets: set[Modality], where: Any) -> int:
    """How deep to search first over ``any`` for queries that expect ``targets``: a caption query finds mostly
    captions, each standing for its image (and an image query images, for their captions), so it searches as
    many times deeper (at most 8) as there are candidates per candidate of the kind it expects. At ``fetch``
    alone, 52 % of the bundled sample's caption queries (5 captions per image) ran out and were searched again;
    on a flat index the deeper search costs about the same."""
    for target in targets:
        fetch = max(fetch, fetch * min(8, -(-scope // max(1, index.scope(target, where)))))
    return min(scope, fetch)


def _query(i: int, image: ImageLike | None, text: str | None) -> Query:
    """An in-memory query record; its image path (if it has one) lets pairs that show it be dropped."""
    if text is not None and not isinstance(text, str):
        raise InputError(f"query {i}: expected a string, got {type(text).__name__}", field="text")
    name = Path(image).name if isinstance(image, str) else ""  # a string that reads like words, not a file name:
    if isinstance(image, str) and text is None and not Path(image).is_file() and " " in image.strip() and \
            ("." not in name or not name.rsplit(".", 1)[1].isalnum()):  # search("red dress") for search(text=...)
        raise InputError(f"image file not found: {image!r} reads like a text, not an image path; to search with "
                         f"a text, pass it as text=: search(text={image!r})", field="image")
    if image is not None:
        check_image_like(image, "image")
    text = text if text and text.strip() else None
    if image is None and text is None:
        raise ConfigError(f"query {i}: give an image, a text, or both")
    modality = Modality.IMAGE_TEXT if image is not None and text else Modality.IMAGE if image is not None \
        else Modality.TEXT
    path = image_path_of(image) if image is not None else None
    return Query(qid=f"query-{i}", modality=modality, txt=text,
                 img_path=str(path.absolute()) if path is not None else None)


def check_options(k: int, modality: str | Modality | None, selection: Any, **options: Any
                  ) -> tuple[Modality | None, Selection]:
    """(the modality filter, the :class:`Selection`) of a retrieval's options, checked before any query is
    encoded (or any model loaded): ``k`` a positive integer, a known modality, a valid selection."""
    if not isinstance(k, int | np.integer) or isinstance(k, bool) or k <= 0:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
    return parse_modality_filter(modality), Selection.of(selection, **options)
