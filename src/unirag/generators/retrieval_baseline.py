"""Generators that need no model: they return what the retriever found (paper rows 1a/1b), both kinds.

No model, no network: they show how far the retriever alone gets, and let the whole pipeline
(selection -> run directory -> metrics) run end to end on a laptop. ``retrieval:top1`` as an image
generator returns the top-1 retrieved example's image, its pixels unchanged (re-saved as PNG).

As caption generators, ``retrieval:top1`` returns the caption of the top-ranked retrieved candidate
(or of its complement when the top hit is an image), as the official UniRAG code scores its retrievers
(castorini/UniRAG ``src/unirag/eval_caption_generation.py``): in ``--mode rag`` the caption pipeline
takes it with :meth:`unirag.pipelines.examples.RagExamples.top_caption`, without skipping a top hit that
is the query image's own caption; with random examples it is the first example's caption.
``retrieval:consensus`` returns the top-k caption most similar on average to the others (consensus
re-ranking, in the spirit of Devlin et al. 2015's nearest-neighbour captioning): a caption that agrees
with many neighbours is less likely to describe a near-duplicate's idiosyncrasies. Similarity: the
cosine of MiniLM sentence embeddings (the encoder shipped with unirag) or, with ``similarity="lexical"``,
of word counts, which needs nothing but Python. These are the default.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from unirag.data.images import load_rgb
from unirag.errors import BackendError, ConfigError
from unirag.generators.base import ExampleCaptioner, Generation, Usage
from unirag.generators.images.base import GeneratedImage, ImageBackend, ImageRequest

STRATEGIES = ("top1", "consensus")
SIMILARITIES = ("minilm", "lexical")
_WORD = re.compile(r"[a-z0-9]+")


def lexical_similarity(captions: Sequence[str]):
    """Cosines of the captions' unigram+bigram counts (lower-cased words)."""
    import numpy as np

    words = [_WORD.findall(c.lower()) for c in captions]
    vecs = [Counter(w) + Counter(" ".join(p) for p in zip(w, w[1:], strict=False)) for w in words]
    norms = [sum(v * v for v in vec.values()) ** 0.5 for vec in vecs]
    n = len(captions)
    sim = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            dot = sum(cnt * vecs[j].get(tok, 0) for tok, cnt in vecs[i].items())
            s = dot / (norms[i] * norms[j]) if norms[i] and norms[j] else 0.0
            sim[i, j] = sim[j, i] = s
    return sim


def consensus_index(sim) -> int:
    """Index of the caption with the highest mean similarity to the others (ties: the better-ranked)."""
    import numpy as np

    n = sim.shape[0]
    # the diagonal left out, not subtracted: float32 self-similarities (1 +- 1e-7) would otherwise
    # leave rounding error in the means and break exact ties
    others = np.array(sim, dtype=np.float64)
    np.fill_diagonal(others, 0.0)
    mean = others.sum(axis=1) / (n - 1)
    return int(np.flatnonzero(mean >= mean.max() - 1e-9)[0])


class RetrievalCaptioner(ExampleCaptioner):
    """Returns a retrieved caption; it is given the examples' captions, never a prompt."""

    def __init__(self, strategy: str, *, similarity: str = "minilm", text_encoder: str | None = None,
                 device: str | None = None, spec: str | None = None) -> None:
        if strategy not in STRATEGIES:
            raise ConfigError(f"unknown retrieval captioner {strategy!r}; expected retrieval:top1 or "
                              "retrieval:consensus")
        if similarity not in SIMILARITIES:
            raise ConfigError(f"unknown similarity {similarity!r}; expected one of {', '.join(SIMILARITIES)}")
        self.strategy = strategy
        self.similarity = similarity
        self.text_encoder = text_encoder
        self.device = device or "cpu"
        self.spec = spec or f"retrieval:{strategy}"
        self._encoder = None
        self._lock = threading.Lock()

    def caption_from_examples(self, captions: Sequence[str]) -> Generation:
        captions = [c for c in captions if c and c.strip()]
        if not captions:
            raise BackendError(f"{self.spec}: no retrieved captions for this query (need k >= 1 and a "
                               "retrieval run with pairs)")
        if self.strategy == "top1" or len(captions) == 1:
            chosen = 0
        elif self.similarity == "lexical":
            chosen = consensus_index(lexical_similarity(captions))
        else:
            with self._lock:
                if self._encoder is None:
                    from unirag.encoders.registry import load_text_encoder

                    self._encoder = load_text_encoder(self.text_encoder, device=self.device)
                emb = self._encoder.encode_texts(list(captions))
            sim = emb @ emb.T  # embeddings are L2-normalised: cosine
            # Symmetric as cosine is: float32 products can differ in the last bit between (i, j) and (j, i),
            # which would break the tie of two captions (each one's mean is their one similarity) at random.
            chosen = consensus_index((sim + sim.T) / 2)
        return Generation(text=captions[chosen], usage=Usage(), raw={"chosen_rank": chosen + 1})

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "backend": "retrieval", "strategy": self.strategy,
                # what top1 returns (recorded so a run made with the earlier first-kept-pair rule is not resumed)
                "top1": "top candidate or its complement (official)" if self.strategy == "top1" else None,
                "similarity": self.similarity if self.strategy == "consensus" else None,
                "text_encoder": self.text_encoder}


class RetrievalImageGenerator(ImageBackend):
    min_examples = 1
    # Not a model: decoding and PNG-encoding release the GIL, so the run loop may use threads (and
    # pricing treats the ``retrieval:`` prefix as free).
    local = False

    def __init__(self, strategy: str, *, spec: str | None = None, noise: bool = False) -> None:
        """``noise``: a query without an example image gets 224x224 uniform random noise (drawn from the
        request's seed and qid), as the official retriever metrics score it (``image_top1 = top-candidate``)."""
        self.noise = bool(noise)
        if strategy != "top1":
            raise ConfigError(f"unknown retrieval image baseline {strategy!r}; expected one of: retrieval:top1")
        self.strategy = strategy
        self.spec = spec or f"retrieval:{strategy}"

    def generate(self, request: ImageRequest) -> GeneratedImage:
        if not request.examples and self.noise:
            import numpy as np
            from PIL import Image

            rng = np.random.default_rng(list(f"{request.seed}|{request.qid}".encode()))
            pixels = rng.integers(0, 256, size=(224, 224, 3), dtype=np.uint8)
            return GeneratedImage(image=Image.fromarray(pixels, "RGB"), meta={"source": "noise"})
        if not request.examples:
            raise ConfigError(f"{self.spec} needs at least one example per query (query {request.qid} has none)")
        top = request.examples[0]
        return GeneratedImage(image=load_rgb(top.image, loading=request.loading),
                              meta={"source": top.label, "source_path": str(top.image)})

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "backend": "retrieval", "strategy": self.strategy,
                **({"noise": True} if self.noise else {})}
