"""The one place the service touches the library: search, caption, generate, compose, pool images.

The web layer (:mod:`unirag.serve.app`) only parses requests and renders JSON; everything it
answers comes from an :class:`Engine`. Generator calls run under a bounded semaphore and the shared
retry loop (:mod:`unirag.runs.retry`), with the same ``--concurrency``/``--max-attempts`` meaning as
batch runs; a call that still fails raises :class:`~unirag.errors.BackendError`, which the web layer
turns into 503 while searches keep working.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.errors import BackendError, ConfigError
from unirag.serve.settings import ServeSettings

MODALITIES = ("any", "image", "text")
CAPTION_MODES = ("zero-shot", "random", "rag")


@dataclass
class SearchQuery:
    """One search: an RGB PIL image, a text, or both (fused)."""

    image: Any = None
    text: str | None = None

    def __post_init__(self) -> None:
        if self.image is None and not (self.text and self.text.strip()):
            raise ConfigError("a search needs a text, an image, or both")


@dataclass
class Hit:
    did: str
    score: float
    modality: str
    caption: str | None
    image_did: str | None  # the pool image shown for this hit (the candidate or its paired image)


@dataclass
class Example:
    caption: str
    image_did: str | None


@dataclass
class CaptionAnswer:
    caption: str
    examples: list[Example]
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = None
    attempts: int = 1
    generator: str = ""


@dataclass
class ImageAnswer:
    image: Any  # PIL image
    examples: list[Example]
    attempts: int = 1
    generator: str = ""


@dataclass
class CirAnswer:
    hits: list[Hit]
    stage: str
    note: str | None = None


class Engine:
    """One loaded index (encoder, FAISS, metadata) and the configured generators, shared by all requests."""

    def __init__(self, settings: ServeSettings, *, retriever=None, generator=None, image_generator=None) -> None:
        """``retriever``: an already loaded one to share (several services, tests); else ``settings.index``."""
        from unirag.retrieval.retriever import Retriever

        self.settings = settings
        self.retriever = retriever if retriever is not None else Retriever(settings.index)
        self.index = self.retriever.index
        self.images_root = self.retriever.pool_images_root
        self._warm_up()
        self._generator = generator
        self._image_generator = image_generator
        self._gen_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(settings.generator_concurrency)

    def _warm_up(self) -> None:
        """Load the encoder and run one text and one image query, so the first request is not slow."""
        from PIL import Image

        self.search_batch([SearchQuery(text="warm up"), SearchQuery(image=Image.new("RGB", (32, 32)))], 1)

    # -- description --------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        m = self.index.manifest
        return {"index": str(self.index.index_dir), "encoder": m["encoder"].get("name"),
                "counts": self.index.counts, "generator": self.settings.generator,
                "image_generator": self.settings.image_generator,
                "cir": "x^r agents" if self.settings.cir_agents else "embedding baseline"}

    # -- pool images ----------------------------------------------------------------------------
    def image_file(self, did: str) -> Path | None:
        """The file of pool candidate ``did`` when it has an image; None for unknown ids.

        ``did`` is only ever a key into the index's own metadata: no part of it reaches a path.
        """
        from unirag.data.records import resolve_image

        gid = self.index.gid_of(did)
        if gid is None:
            return None
        meta = self.index.metas[gid]
        if not meta.modality.has_image or not meta.img_path:
            return None
        path = resolve_image(meta.img_path, self.images_root)
        return path if path is not None and path.is_file() else None

    # -- search -----------------------------------------------------------------------------------
    def search_batch(self, queries: Sequence[SearchQuery], k: int, modality: str = "any") -> list[list[Hit]]:
        """One encoder pass per input kind and one FAISS call for all ``queries``."""
        import numpy as np

        from unirag.data.records import Modality, Query

        if modality not in MODALITIES:
            raise ConfigError(f"modality must be one of {', '.join(MODALITIES)}, got {modality!r}")
        encoder = self.retriever.encoder
        vectors = np.zeros((len(queries), encoder.dim), dtype=np.float32)
        records = []
        groups: dict[str, list[int]] = {"text": [], "image": [], "fused": []}
        for i, q in enumerate(queries):
            text = q.text.strip() if q.text and q.text.strip() else None
            kind = "fused" if (q.image is not None and text) else "image" if q.image is not None else "text"
            groups[kind].append(i)
            mod = {"fused": Modality.IMAGE_TEXT, "image": Modality.IMAGE, "text": Modality.TEXT}[kind]
            records.append(Query(qid=f"q{i}", modality=mod, txt=text))
        if groups["text"]:
            vectors[groups["text"]] = encoder.encode_texts([queries[i].text.strip() for i in groups["text"]])
        if groups["image"]:
            vectors[groups["image"]] = encoder.encode_images([queries[i].image for i in groups["image"]])
        if groups["fused"]:
            idx = groups["fused"]
            vectors[idx] = encoder.encode_fused([queries[i].image for i in idx], [queries[i].text.strip() for i in idx])
        results = self.retriever.retrieve_vectors(records, vectors, k, modality)
        return [self._hits(r) for r in results]

    def search(self, query: SearchQuery, k: int = 5, modality: str = "any") -> list[Hit]:
        return self.search_batch([query], k, modality)[0]

    def _hits(self, result) -> list[Hit]:
        pairs = {}
        for p in result.pairs:
            pairs.setdefault(p.image_did, p)
            pairs.setdefault(p.text_did, p)
        out = []
        for c in result.candidates:
            meta = self.index.metas[self.index.gid_of(c.did)]
            pair = pairs.get(c.did)
            caption = meta.txt if meta.modality.has_text else (pair.txt if pair else None)
            image_did = c.did if meta.modality.has_image else (pair.image_did if pair else None)
            out.append(Hit(c.did, float(c.score), c.modality, caption, image_did))
        return out

    # -- examples -------------------------------------------------------------------------------
    def examples(self, mode: str, k: int, *, image=None, text: str | None = None, want: str = "text",
                 seed_bytes: bytes = b"") -> list[Example]:
        """Few-shot examples: none (zero-shot), k random pool pairs (seeded by the input), or retrieved."""
        if mode not in CAPTION_MODES:
            raise ConfigError(f"mode must be one of {', '.join(CAPTION_MODES)}, got {mode!r}")
        if mode == "zero-shot":
            return []
        if k < 1:
            raise ConfigError(f"{mode} mode needs k >= 1, got {k}")
        if mode == "random":
            return self._random_examples(k, seed_bytes or (text or "").encode())
        hits = self.search(SearchQuery(image=image, text=text), k=k, modality=want)
        return [Example(h.caption, h.image_did) for h in hits if h.caption and h.image_did]

    def _random_examples(self, k: int, seed: bytes) -> list[Example]:
        """k pool images (sampled by row, so large pools cost k lookups, not a scan) with one of their captions."""
        from unirag.data.records import Modality

        rng = random.Random(hashlib.sha256(seed).hexdigest())
        count = self.index.counts.get(Modality.IMAGE.value, 0)
        offset = self.index.offsets.get(Modality.IMAGE, 0)
        metas = self.index.metas
        out: list[Example] = []
        for row in rng.sample(range(count), min(count, 20 * k)):
            meta = metas[offset + row]
            texts = [t for t in self.index.source_group(meta.source_id) if metas[t].modality is Modality.TEXT]
            if texts:
                out.append(Example(metas[rng.choice(texts)].txt, meta.did))
            if len(out) == k:
                break
        return out

    # -- generators -----------------------------------------------------------------------------
    def _text_generator(self):
        with self._gen_lock:
            if self._generator is None:
                if not self.settings.generator:
                    raise BackendError("no caption generator configured (start the service with --generator)")
                from unirag.generators.registry import load_text_generator

                self._generator = load_text_generator(self.settings.generator, **self.settings.generator_options)
            return self._generator

    def _image_gen(self):
        with self._gen_lock:
            if self._image_generator is None:
                if not self.settings.image_generator:
                    raise BackendError("no image generator configured (start the service with --image-generator)")
                from unirag.generators.images.registry import load_image_generator

                self._image_generator = load_image_generator(self.settings.image_generator,
                                                             **self.settings.generator_options)
            return self._image_generator

    def _call(self, fn):
        """Bounded concurrency + retries with backoff, as batch runs do."""
        from unirag.runs.retry import RetryPolicy, call_with_retry

        policy = RetryPolicy(max_attempts=self.settings.max_attempts, base_delay=self.settings.retry_base_delay)
        with self._slots:
            return call_with_retry(fn, policy)

    def caption(self, image, data: bytes, mode: str = "rag", k: int = 5) -> CaptionAnswer:
        generator = self._text_generator()
        examples = self.examples(mode, k, image=image, want="text", seed_bytes=data)
        if getattr(generator, "uses_examples", False):
            if not examples:
                raise ConfigError(f"{generator.spec} picks among retrieved captions: use mode rag with k >= 1")
            gen, attempts = self._call(lambda: generator.caption_from_examples([e.caption for e in examples]))
        else:
            gen, attempts = self._prompted_caption(generator, data, examples)
        from unirag.generators.pricing import cost_usd, price_for

        text = gen.text.strip()
        if not text:
            raise BackendError(f"{generator.spec} returned an empty caption")
        return CaptionAnswer(text, examples, gen.usage.as_dict(), cost_usd(gen.usage, price_for(generator.spec)),
                             attempts, generator.spec)

    def _prompted_caption(self, generator, data: bytes, examples: list[Example]):
        from unirag.generators.base import GenerationOptions
        from unirag.prompts.caption import Shot, build_caption_prompt, caption_template

        tpl = caption_template(generator.template_family)
        shots = [Shot(self.image_file(e.image_did), e.caption, e.image_did) for e in examples]
        with tempfile.TemporaryDirectory(prefix="unirag-serve-") as tmp:
            query = Path(tmp) / "query.img"  # our own name: nothing from the request reaches the file system
            query.write_bytes(data)
            prompt = build_caption_prompt(tpl, query, shots, query_label="query")
            return self._call(lambda: generator.generate(prompt.messages, GenerationOptions()))

    def generate_image(self, text: str, mode: str = "rag", k: int = 1) -> ImageAnswer:
        from unirag.generators.images.base import ExamplePair, ImageRequest

        generator = self._image_gen()
        examples = self.examples(mode, k, text=text, want="image")
        generator.check_k(len(examples))
        pairs = [ExamplePair(self.image_file(e.image_did), e.caption, e.image_did) for e in examples]
        request = ImageRequest(qid=f"serve-{time.time_ns()}", caption=text, examples=pairs)
        out, attempts = self._call(lambda: generator.generate(request))
        return ImageAnswer(out.image, examples, attempts, generator.spec)

    # -- composed retrieval ---------------------------------------------------------------------
    def cir(self, image, text: str, k: int = 10) -> CirAnswer:
        """Reference image + modification text -> ranked pool images (embedding baseline: CLIP-SF fusion)."""
        hits = self.search(SearchQuery(image=image, text=text), k=k, modality="image")
        return CirAnswer(hits, "baseline", "embedding baseline (fused reference image + text)")

    def close(self) -> None:
        for gen in (self._generator, self._image_generator):
            if gen is not None:
                gen.close()
