"""``retrieval:top1``: return the top-1 retrieved example's image unchanged (paper Table 5 rows 1a/1b).

The offline baseline of the text-to-image task: no model, no network. It shows how far the
retriever alone gets, and lets the whole pipeline (selection -> run directory -> metrics) run end
to end on a laptop. The image is decoded and re-saved as PNG, so its pixels equal the source's.
"""

from __future__ import annotations

from typing import Any

from unirag.data.images import load_rgb
from unirag.errors import ConfigError
from unirag.generators.images.base import GeneratedImage, ImageGenerator, ImageRequest

STRATEGIES = ("top1",)


class RetrievalImageGenerator(ImageGenerator):
    min_examples = 1
    max_examples = None
    # Not a model: decoding and PNG-encoding release the GIL, so the run loop may use threads (and
    # pricing treats the ``retrieval:`` prefix as free).
    local = False

    def __init__(self, strategy: str, *, spec: str | None = None, noise: bool = False) -> None:
        """``noise``: a query without an example image gets 224x224 uniform random noise (drawn from the
        request's seed and qid), as the official retriever metrics score it (``image_top1 = top-candidate``)."""
        self.noise = bool(noise)
        if strategy not in STRATEGIES:
            raise ConfigError(f"unknown retrieval image baseline {strategy!r}; expected one of: "
                              + ", ".join(f"retrieval:{s}" for s in STRATEGIES))
        self.strategy = strategy
        self.spec = spec or f"retrieval:{strategy}"

    def prompt_text(self, request: ImageRequest) -> str:
        return request.caption

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
