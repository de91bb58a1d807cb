"""Few-shot example selection shared by captioning and image generation (paper §3.2).

* ``zero-shot``: no examples (k = 0).
* ``random``: k gold image-caption pairs of *other* queries (their image + a positive caption, or
  their caption + a positive image), drawn with a seed derived from (seed, qid) so a query gets the
  same examples on every run and after a resume, whatever the order; never the query itself.
* ``rag``: the top-k completed pairs of a retrieval run file, or retrieved on the fly from an
  index with :class:`unirag.retrieval.retriever.Retriever`.

Examples are :class:`~unirag.retrieval.results.Pair` s whose image paths are relative to the
pool's images root (:attr:`ExampleSelector.images_root`); :meth:`Pair.rooted` resolves them.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unirag.data.mbeir import load_pool
from unirag.data.records import Candidate, Query
from unirag.errors import BackendError, ConfigError, InputError
from unirag.profiles import SETTINGS, resolve
from unirag.retrieval.results import Pair
from unirag.retrieval.run_io import read_retrieval_run, read_run_manifest
from unirag.retrieval.selection import Selection

MODES = ("zero-shot", "random", "rag")


class ExampleSelector:
    """Where a run's few-shot examples come from; this base gives none (zero-shot, k = 0)."""

    mode, k = "zero-shot", 0
    #: Where the examples' relative image paths start, when the source knows (an index does).
    images_root: str | Path | None = None

    def select(self, query: Query) -> list[Pair]:
        """The examples for one query, best first (at most k)."""
        return []

    def prepare(self, queries: Sequence[Query]) -> None:
        """Called once with the queries still to do (lets on-the-fly retrieval batch its work)."""

    def source(self) -> dict[str, Any]:
        """What the manifest records about where examples come from."""
        return {"mode": self.mode, "k": self.k}

    def leak_info(self, query: Query) -> dict[str, int] | None:
        """The leakage guard's count for this query's examples (``{"flagged", "excluded"}``), if any."""
        return None


def example_images_root(pool_images_root: str | Path | None, selector: ExampleSelector | None,
                        images_root: str | Path | None) -> str | Path | None:
    """Where the examples' relative image paths start: the one rule of every run that shows examples
    (caption runs, image runs, grid cells). The pool's images root as given (``--pool-images-root``),
    else the one the index recorded (rag mode with an index), else the queries' (``--images-root``)."""
    roots = (pool_images_root, selector.images_root if selector is not None else None, images_root)
    return next((root for root in roots if root is not None), None)


def _query_image_key(q: Query) -> str | None:
    return str(Path(q.img_path)) if q.img_path else None


def gold_pair(query: Query, pool: dict[str, Candidate]) -> Pair | None:
    """A query's ground-truth image-caption pair: its own image/text plus a positive of the other kind."""
    for did in query.pos_cand_list:
        cand = pool.get(did)
        if cand is None:
            continue
        if query.img_path and cand.txt:
            return Pair(image_did=None, text_did=cand.did, img_path=query.img_path, txt=cand.txt)
        if query.txt and cand.img_path:
            return Pair(image_did=cand.did, text_did=None, img_path=cand.img_path, txt=query.txt)
    return None


class RandomGold(ExampleSelector):
    """k gold pairs of other queries; deterministic per (seed, qid)."""

    mode = "random"

    def __init__(self, k: int, all_queries: Sequence[Query], pool: dict[str, Candidate], seed: int = 0,
                 pool_path: str | None = None) -> None:
        self.k, self.seed, self.pool_path = k, seed, pool_path
        pairs = ((q, gold_pair(q, pool)) for q in all_queries)
        # the draw depends on the set of queries, not file order
        self._gold = sorted(((q, ex) for q, ex in pairs if ex is not None), key=lambda item: item[0].qid)
        if len(self._gold) <= k:
            raise ConfigError(f"random few-shot with k={k} needs more than {k} queries with a gold pair in the "
                              f"pool; found {len(self._gold)} (check --pool and the queries' pos_cand_list)")

    def _eligible(self, query: Query, cand_query: Query, ex: Pair) -> bool:
        if cand_query.qid == query.qid:
            return False
        own_image = _query_image_key(query)
        if own_image is not None and str(Path(ex.img_path)) == own_image:
            return False  # another caption query of the same image would leak the answer
        if query.txt and ex.txt.strip() == query.txt.strip():
            return False
        positives = set(query.pos_cand_list)
        return ex.text_did not in positives and ex.image_did not in positives

    def select(self, query: Query) -> list[Pair]:
        rng = random.Random(f"{self.seed}|{query.qid}")
        order = list(range(len(self._gold)))
        rng.shuffle(order)
        eligible = (ex for q, ex in map(self._gold.__getitem__, order) if self._eligible(query, q, ex))
        return list(itertools.islice(eligible, self.k))

    def source(self) -> dict[str, Any]:
        return {"mode": self.mode, "k": self.k, "seed": self.seed, "pool": self.pool_path,
                "gold_pairs": len(self._gold)}


class RagExamples(ExampleSelector):
    """The top-k completed pairs of retrieval results: those of a retrieval run file (``run_path``,
    ``unirag retrieve`` output), or retrieved on the fly (one batched retrieval before the run) from
    ``index``: an index directory, a :class:`unirag.Index` or a live :class:`unirag.Retriever` (whose
    loaded encoder is reused). ``pool_path``: where the official top-1 baselines look up a candidate's
    complement (:meth:`top_caption`, :meth:`top_image`)."""

    mode = "rag"
    _pool: dict[str, Candidate] | None = None
    _pool_lock = threading.Lock()

    def __init__(self, k: int, *, run_path: str | Path | None = None, index: Any = None,
                 query_images_root: str | Path | None = None, modality: str = "any",
                 pool_path: str | Path | None = None, profile: Any = None, selection: Any = None) -> None:
        self.k, self.query_images_root, self.modality = k, query_images_root, modality
        self.pool_path = Path(pool_path) if pool_path is not None else None
        self.run_path = Path(run_path) if run_path is not None else None
        self.retriever = None
        self._results: dict[str, Any] = {}
        if self.run_path is not None:
            self._results = read_retrieval_run(self.run_path)
            return
        from unirag.retrieval.retriever import Retriever

        self.selection = Selection.of(selection)
        self.retriever = index if isinstance(index, Retriever) else Retriever(index, profile=profile)

    @property
    def images_root(self) -> str | None:
        """The pool's images root, as the index recorded it: where the examples' image paths start."""
        return self.retriever.pool_images_root if self.retriever is not None else None

    def prepare(self, queries: Sequence[Query]) -> None:
        todo = [q for q in queries if q.qid not in self._results]
        if not todo:
            return
        if self.retriever is None:
            raise InputError(f"{len(todo)} query id(s) have no retrieval results, e.g. "
                             f"{', '.join(q.qid for q in todo[:5])}; was the run made for these queries?",
                             path=self.run_path)
        for r in self.retriever.retrieve(todo, self.k, self.modality, query_images_root=self.query_images_root,
                                         progress=True, selection=self.selection):
            self._results[r.qid] = r

    def _result(self, query: Query) -> Any:
        if query.qid not in self._results and self.retriever is not None:
            self.prepare([query])
        return self._results.get(query.qid)

    def select(self, query: Query) -> list[Pair]:
        """The first k whole pairs, never the query's own image as its example."""
        result, own_image = self._result(query), _query_image_key(query)
        return [p for p in (result.pairs if result is not None else [])
                if p.img_path and p.txt and (own_image is None or str(Path(p.img_path)) != own_image)][: self.k]

    def leak_info(self, query: Query) -> dict[str, int] | None:
        result = self._results.get(query.qid)
        return result.near_duplicates if result is not None else None

    def source(self) -> dict[str, Any]:
        if self.run_path is not None:
            out = {"mode": self.mode, "k": self.k, "retrieval": str(self.run_path)}
            selection = (read_run_manifest(self.run_path) or {}).get("selection")
            if selection is not None:  # the run file's own manifest (runs written before it have none)
                out["selection"] = selection
            return out
        out = {"mode": self.mode, "k": self.k, "index": str(Path(self.retriever.index.path)),
               "selection": self.selection.to_dict()}
        if self.modality != "any":  # only when searched by task, so earlier runs still resume
            out["modality"] = self.modality
        settings = self.retriever.settings
        changed = {n: settings[n] for n in ("pair_completion", "example_pairs", "pair_alignment")
                   if settings[n] != SETTINGS[n].default}
        if changed:  # only when not the default, so runs made before these settings existed still resume
            out["pairing"] = changed
        return out

    def _top(self, query: Query, field: str) -> tuple[Pair | None, Candidate | None, Candidate | None]:
        """Where the top retrieved candidate's ``field`` ("txt" or "img_path") is, as the official top-1
        baselines look it up (nothing skipped, unlike the few-shot examples): ``(the run's pair holding
        the candidate, None, None)``, else ``(None, the candidate in the pool, the pool item holding it:
        the candidate, else the item of its source with it, a text-only one for "txt"; or None)``
        (castorini/UniRAG src/unirag/eval_caption_generation.py@0a6e6a36:151-158,
        src/unirag/eval_image_generation.py@e9a4e00:108-140)."""
        result = self._result(query)
        if not result:
            return None, None, None
        top = result[0].did
        for p in result.pairs:
            if top in (p.text_did, p.image_did) and getattr(p, field):
                return p, None, None
        with self._pool_lock:  # the pool, read once (None: no --pool)
            if self._pool is None and self.pool_path is not None:
                self._pool = load_pool(self.pool_path)
        pool = self._pool
        cand = pool.get(top) if pool is not None else None
        if cand is None or getattr(cand, field):
            return None, cand, cand
        for c in pool.values() if cand.source_id is not None else ():
            if c.source_id == cand.source_id and getattr(c, field) and (field == "img_path" or not c.img_path):
                return None, cand, c
        return None, cand, None

    def top_image(self, query: Query) -> Pair | None:
        """The official top-1 image baseline's example: the top retrieved candidate's own image, else its
        complement's (see :meth:`_top`), else None."""
        pair, cand, holder = self._top(query, "img_path")
        if pair is not None:
            return Pair(image_did=pair.image_did, text_did=pair.text_did, img_path=pair.img_path, txt=pair.txt)
        if holder is None:
            return None
        return Pair(image_did=holder.did, text_did=None if holder is cand else cand.did, img_path=holder.img_path,
                    txt=cand.txt or "")

    def top_caption(self, query: Query) -> str:
        """The official top-1 caption baseline's caption (paper rows 1a/1b, see :meth:`_top`): the top
        candidate's caption, or its complement's when that candidate is an image."""
        pair, _, holder = self._top(query, "txt")
        if pair is None and holder is None:
            result = self._results.get(query.qid)
            top = result[0].did if result else None
            hint = "" if self.pool_path is not None else "; pass --pool so its caption can be looked up"
            raise BackendError(f"no caption for the top retrieved candidate of {query.qid} ({top}){hint}")
        return pair.txt if pair is not None else holder.txt


def make_selector(mode: str, k: int, *, queries: Sequence[Query] = (), pool_path: str | Path | None = None,
                  retrieval: str | Path | None = None, index: Any = None, seed: int = 0,
                  query_images_root: str | Path | None = None, profile: Any = None,
                  selection: Any = None, supplies: str = "text") -> ExampleSelector:
    """The selector for a mode; checks that the options the mode needs are there.

    ``index``: an index directory, a :class:`unirag.Index` or a :class:`unirag.Retriever` to
    retrieve examples from on the fly; ``retrieval``: a retrieval run file. ``profile``: the settings
    on-the-fly retrieval makes its pairs with (``pair_completion``, ``example_pairs``); a retrieval
    run file already holds the pairs ``unirag retrieve`` made under its own profile. ``selection``:
    how retrieved pairs become examples (:class:`unirag.Selection`; with ``index``: a run file was
    selected when it was made, so only the default may be given with ``retrieval``). ``supplies``: what the
    examples add to the query, ``text`` (captioning) or ``image`` (image generation): the modality an index
    is searched with under ``rag_modality = task``.
    """
    selection = Selection.of(selection)
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if mode == "zero-shot":
        if k not in (0, None):
            raise ConfigError(f"zero-shot mode uses k=0, got k={k}")
        return ExampleSelector()
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"{mode} mode needs k >= 1, got {k!r}")
    if mode == "random":
        if pool_path is None:
            raise ConfigError("random few-shot needs --pool (to look up the other queries' gold captions)")
        return RandomGold(k, queries, load_pool(pool_path), seed, str(pool_path))
    if (retrieval is None) == (index is None):
        raise ConfigError("rag mode needs exactly one of --retrieval RUN.jsonl or --index INDEX_DIR")
    if retrieval is not None:
        if selection != Selection():
            raise ConfigError("example selection options apply when retrieving: pass them to `unirag retrieve` "
                              "(the run file holds the examples it chose) or use --index")
        return RagExamples(k, run_path=retrieval, pool_path=pool_path)
    modality = supplies if resolve(profile)["rag_modality"] == "task" else "any"
    return RagExamples(k, index=index, query_images_root=query_images_root, modality=modality, pool_path=pool_path,
                       profile=profile, selection=selection)
