"""The one place the service touches the library: a thin layer over the public Python API.

Searches go to :class:`unirag.Retriever` (``search_batch``: one encoder pass and one FAISS call for
all queries of a batch), captions to :class:`unirag.Captioner`, pictures to
:class:`unirag.ImageGenerator`, composed retrieval to :class:`unirag.XR` (with ``--cir-agents``;
without agents X^R's embedding baseline is the fused query searched over the index's images, which
the loaded retriever answers directly). The web layer (:mod:`unirag.serve.app`) only parses
requests and renders JSON.

Generator calls run under a bounded semaphore and the shared retry loop (:mod:`unirag.runs.retry`),
with the same ``--concurrency``/``--max-attempts`` meaning as batch runs (local models: one call
at a time); a call that still fails raises :class:`~unirag.errors.BackendError`, which the web
layer turns into 503 while searches keep working.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import unirag
from unirag.data.records import Modality, resolve_image
from unirag.errors import BackendError, ConfigError
from unirag.retrieval.near_duplicates import dhash, digest_of, hamming, hash_of
from unirag.retrieval.results import Hit, Pair
from unirag.retrieval.selection import Selection, Thresholds
from unirag.runs.retry import RetryPolicy, call_with_retry
from unirag.serve.settings import ServeSettings

#: Extra composed-retrieval results fetched, so that k remain once the reference image is left out.
_REFERENCE_SLACK = 3
#: Backends that run a model in this process: one call at a time, whatever --concurrency says.
LOCAL_PREFIXES = ("hf", "diffusers")
MODALITIES = ("any", "image", "text")


@dataclass
class SearchQuery:
    """One search: an RGB PIL image, a text, or both (fused; ``Retriever.search_batch`` refuses neither)."""

    image: Any = None
    text: str | None = None
    #: example selection (:class:`unirag.Selection`); None: the defaults
    selection: Any = None


@dataclass
class Answer:
    """A generator's answer: a caption (str) or a picture (PIL image), with the examples in its prompt."""

    output: Any
    examples: list[Pair]
    attempts: int
    generator: str
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = None


class Engine:
    """One loaded index (encoder, FAISS, metadata) and the configured generators, shared by all requests."""

    def __init__(self, settings: ServeSettings, *, retriever=None) -> None:
        """``retriever``: an already loaded :class:`unirag.Retriever` to share (several services, tests)."""
        self.settings = settings
        shared = retriever is not None  # a caller's retriever is already loaded and warm
        self.retriever = retriever if shared else unirag.Retriever(settings.index, device=settings.device,
                                                                   memory=settings.index_memory)
        self.index = self.retriever.index
        self.images_root = self.retriever.pool_images_root
        # One attempt each: generate() retries with the service's policy (--max-attempts), counting attempts.
        opts = {**settings.generator_options, "max_attempts": 1}
        specs = {"caption": settings.generator, "image": settings.image_generator}
        self.generators = {kind: cls(specs[kind], images_root=self.images_root, **opts) if specs[kind] else None
                           for kind, cls in (("caption", unirag.Captioner), ("image", unirag.ImageGenerator))}
        self.xr = unirag.XR(agents=settings.cir_agents, encoder=self.index.manifest["encoder"].get("spec")) \
            if settings.cir_agents else None
        self._xr_lock = threading.Lock()  # one X^R run at a time (it shares its work folder and caches)
        # Every encoder call runs on this one thread: batched searches (the batcher hands them here), example
        # retrieval for caption/image requests and the warm-up. The encoder is not thread-safe, and torch gives
        # each thread that calls it an OpenMP team of its own: with more OpenMP threads than cores, libgomp
        # stops spinning between parallel regions and each of a forward pass's ~100 regions waits for a
        # wake-up (16 clients on 2 cores: 288-296 -> 333-361 searches/s, docs/benchmarks.md).
        self.model_thread = ThreadPoolExecutor(1, thread_name_prefix="unirag-model", initializer=self._mark_model)
        self._model_ident: int | None = None
        self._slots = {kind: threading.BoundedSemaphore(1 if (spec or "").split(":", 1)[0].strip().lower()
                                                        in LOCAL_PREFIXES else settings.generator_concurrency)
                       for kind, spec in specs.items()}
        if not shared:
            self.on_model_thread(self._warm_up)

    def _mark_model(self) -> None:
        self._model_ident = threading.get_ident()

    def on_model_thread(self, fn, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` run on the model thread (at once when called there), its result returned."""
        if threading.get_ident() == self._model_ident:
            return fn(*args, **kwargs)
        return self.model_thread.submit(fn, *args, **kwargs).result()

    def _warm_up(self) -> None:
        """Load the encoder and run one text and one image query, so the first request is not slow."""
        from PIL import Image

        self.retriever.warm_up()
        self.search_batch([SearchQuery(text="warm up"), SearchQuery(image=Image.new("RGB", (32, 32)))], 1)

    # -- description --------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        m = self.index.manifest
        return {"index": str(self.index.path), "encoder": m["encoder"].get("name"),
                "counts": self.index.counts, "generator": self.settings.generator,
                "image_generator": self.settings.image_generator,
                "cir": "x^r agents" if self.xr is not None else "embedding baseline"}

    # -- pool images ----------------------------------------------------------------------------
    def image_file(self, did: str) -> Path | None:
        """The file of pool candidate ``did`` when it has an image inside the index's images root; None
        for unknown ids, candidates without an image, and files that resolve (``..``, absolute paths,
        symlinks) outside the root - or any file when the index records no images root.

        ``did`` is only ever a key into the index's own metadata: no part of it reaches a path.
        """
        gid = self.index.gid_of(did)
        if gid is None or self.images_root is None:
            return None
        meta = self.index.metas[gid]
        if not meta.modality.has_image or not meta.img_path:
            return None
        path = resolve_image(meta.img_path, self.images_root)
        if path is None or not path.is_file():
            return None
        real, root = path.resolve(), Path(self.images_root).resolve()
        return real if real.is_relative_to(root) else None

    # -- search -----------------------------------------------------------------------------------
    def search_batch(self, queries: Sequence[SearchQuery], k: int, modality: str = "any") -> list[list[Hit]]:
        """``Retriever.search_batch``: one encoder pass per input kind and one FAISS call for all ``queries``;
        every hit carries the pair it is shown with (its caption and pool image). Runs on the model thread."""
        return self.on_model_thread(self._search_batch, queries, k, modality)

    def _search_batch(self, queries: Sequence[SearchQuery], k: int, modality: str) -> list[list[Hit]]:
        texts = [q.text.strip() if q.text and q.text.strip() else None for q in queries]
        groups: dict[Any, list[int]] = {}  # one search_batch per distinct selection
        for i, q in enumerate(queries):
            groups.setdefault(Selection.of(q.selection), []).append(i)
        found: list[Any] = [None] * len(queries)
        for sel, idx in groups.items():
            for i, hits in zip(idx, self.retriever.search_batch([queries[i].image for i in idx],
                                                                [texts[i] for i in idx], k=k, modality=modality,
                                                                selection=sel), strict=True):
                found[i] = hits
        return [[self._hit(h) for h in hits] for hits in found]

    def _hit(self, h: Hit) -> Hit:
        if h.pair is not None:
            return h
        # the candidate's own pair showed the query: describe the candidate itself
        meta = self.index.metas[self.index.gid_of(h.did)]
        text = meta.modality.has_text
        return replace(h, pair=Pair(h.did if meta.modality.has_image else None, h.did if text else None, None,
                                    meta.txt if text else None))

    # -- examples -------------------------------------------------------------------------------
    def examples(self, mode: str, k: int, *, image=None, text: str | None = None, seed_bytes: bytes = b"",
                 selection: Any = None) -> list[Pair]:
        """Few-shot examples, as the API takes them and the page shows them.

        zero-shot: none; random: k pool pairs drawn with a seed from the input (the same upload
        gets the same examples); rag: the k pairs ``Retriever.search(image=...)`` (or ``text=``)
        completes for the input, with its defaults - so "examples for this photo" are the same in
        the page, the REST API and Python (an image query pairs by image similarity and gets captions).
        ``mode`` and ``k`` are the route's to check.
        """
        if mode == "zero-shot":
            return []
        if mode == "rag":
            hits = self.on_model_thread(self.retriever.search, image=image, text=text, k=k, selection=selection)
            return [p for p in hits.pairs if p.caption and p.img_path][:k]
        # random: k pool images (sampled by row, so large pools cost k lookups, not a scan), a caption each
        rng = random.Random(hashlib.sha256(seed_bytes or (text or "").encode()).hexdigest())
        count = self.index.counts.get(Modality.IMAGE.value, 0)
        offset = self.index.offsets.get(Modality.IMAGE, 0)
        metas = self.index.metas
        out: list[Pair] = []
        for row in rng.sample(range(count), min(count, 20 * k)):
            meta = metas[offset + row]
            texts = [t for t in self.index.source_group(meta.source_id) if metas[t].modality is Modality.TEXT]
            if texts:
                text = metas[rng.choice(texts)]
                image = self.image_file(meta.did)
                out.append(Pair(meta.did, text.did, str(image) if image is not None else None, text.txt))
            if len(out) == k:
                break
        return out

    # -- generators -----------------------------------------------------------------------------
    def generate(self, kind: str, *, image=None, text: str | None = None, data: bytes = b"", mode: str = "rag",
                 k: int = 5, selection: Any = None) -> Answer:
        """A generator's answer with its :meth:`examples` (``selection``: how retrieved pairs become
        examples, rag mode): kind "caption" captions the uploaded ``image`` (``data``: its encoded bytes),
        "image" draws ``text``. The call runs under bounded concurrency and retries with backoff
        (Retry-After honoured), as batch runs do."""
        gen = self.generators[kind]
        if gen is None:
            option = "--generator" if kind == "caption" else "--image-generator"
            raise BackendError(f"no {kind} generator configured (start the service with {option})")
        examples = self.examples(mode, k, image=image, text=text, seed_bytes=data, selection=selection)
        if kind == "caption" and mode != "zero-shot" and not examples:
            raise ConfigError("no examples found for this image (is the index empty?)")
        call = (lambda: gen.caption(data, examples, mode=mode)) if kind == "caption" else \
            (lambda: gen.generate_result(text, examples))
        policy = RetryPolicy(max_attempts=self.settings.max_attempts, base_delay=self.settings.retry_base_delay)
        with self._slots[kind]:
            out, attempts = call_with_retry(call, policy)
        if kind == "caption":
            return Answer(out.text, examples, attempts, gen.spec, asdict(out.usage), out.cost)
        return Answer(out.image, examples, attempts, gen.spec)

    # -- composed retrieval ---------------------------------------------------------------------
    def cir(self, image, text: str, k: int = 10, data: bytes = b"",
            keep_reference: bool = False) -> tuple[list[Hit], str, str]:
        """Reference image + modification text -> (ranked pool images, the X^R stage that ranked them, a note).

        The reference image itself is left out of the ranking (as ``unirag cir`` and ``XR.search`` do)
        unless ``keep_reference``: an upload is not a pool id, so a pool image counts as the reference
        when its file has the upload's bytes (``data``) or its dHash is within the near-duplicate
        threshold of the upload's (the same photo re-encoded)."""
        extra = 0 if keep_reference else _REFERENCE_SLACK
        if self.xr is None:
            hits = self.search_batch([SearchQuery(image=image, text=text)], k + extra, "image")[0]
            stage, note = "baseline", ("X^R embedding baseline: reference image and text fused "
                                       "(start with --cir-agents for the agent stages)")
        else:
            with self._xr_lock:
                ranked = self.xr.search(image, text, self.gallery, k=k + extra)
            hits = [replace(h, pair=Pair(h.did, None, None, _caption_of(self.index, h.did))) for h in ranked]
            stage = ranked[0].stage if ranked else "baseline"
            note = f"ranked by the X^R stage {stage!r}"
        if not keep_reference:
            digest, ref_hash = hashlib.sha256(data).hexdigest() if data else None, dhash(image)
            hits = [h for h in hits if not self._is_reference(h.pair.image_did, digest, ref_hash)]
        return hits[:k], stage, note

    def _is_reference(self, did: str | None, digest: str | None, ref_hash: int) -> bool:
        """Whether pool image ``did`` is the uploaded reference: the same bytes (``digest``), or a dHash
        within the near-duplicate threshold of the upload's (the same photo re-encoded)."""
        path = self.image_file(did) if did else None
        if path is None:
            return False
        if digest is not None and digest_of(path) == digest:
            return True
        pool_hash = hash_of(path)
        return pool_hash is not None and hamming(pool_hash, ref_hash) <= Thresholds().image_hash

    @cached_property
    def gallery(self) -> dict[str, str]:
        """Image candidate id -> image file, for X^R (built once)."""
        offset, count = self.index.offsets.get(Modality.IMAGE, 0), self.index.counts.get(Modality.IMAGE.value)
        dids = (self.index.metas[offset + row].did for row in range(count or 0))
        return {did: str(path) for did in dids if (path := self.image_file(did)) is not None}

    def close(self) -> None:
        for obj in (*self.generators.values(), self.xr):
            if obj is not None:
                obj.close()
        self.model_thread.shutdown(wait=False, cancel_futures=True)


def _caption_of(index, did: str) -> str | None:
    """A caption for image candidate ``did``: one from its own source item, if the pool pairs them."""
    metas = index.metas
    return next((metas[g].txt for g in index.source_group(metas[index.gid_of(did)].source_id)
                 if metas[g].modality is Modality.TEXT and metas[g].txt), None)
