"""The call loop every local image model shares (diffusers pipelines, Emu2-Gen, LaVIT, ...).

Example images are decoded once up front (a missing or corrupt file fails the query with a message
naming it, before the model runs); the model renders under ``torch.inference_mode``; out of GPU memory
with several examples, the last (least relevant) examples are dropped one at a time and the call is
retried, as the paper did for Emu2-Gen at k=5 (``meta["examples_used"]`` records it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from unirag.errors import BackendError
from unirag.generators.images.base import GeneratedImage, ImageRequest

#: ``render(request with the examples kept, their decoded PIL images) -> (PIL image, meta)``
Render = Callable[[ImageRequest, list[Any]], tuple[Any, dict[str, Any]]]


def render_with_fallback(request: ImageRequest, render: Render, *, name: str, oom_fallback: bool = True,
                         seed: Callable[[int], None] | None = None) -> GeneratedImage:
    """Run ``render`` for ``request``; see the module docstring. ``seed(request.seed)`` runs before every
    try, for models that draw their noise from torch's global generator."""
    import torch

    from unirag.runtime import free_memory, to_pil_images

    images_all = to_pil_images([e.image for e in request.examples], ahead=request.ahead,
                               loading=request.loading)
    used = len(request.examples)
    while True:
        trimmed = dataclasses.replace(request, examples=request.examples[:used])
        if seed is not None:
            seed(request.seed)
        try:
            with torch.inference_mode():
                image, meta = render(trimmed, images_all[:used])
            break
        except torch.OutOfMemoryError as e:
            free_memory()
            if oom_fallback and used > 1:
                used -= 1
                continue
            raise BackendError(f"{name}: out of memory for query {request.qid} "
                               f"({request.width}x{request.height}, {used} reference image(s)): {e}", kind="oom") from None
    meta = dict(meta)
    if used < len(request.examples):
        meta["examples_used"] = used
    from unirag.data.images import load_rgb

    return GeneratedImage(image=load_rgb(image), meta=meta)


def seed_torch(seed: int) -> None:
    """Seed torch's global generators (CPU and every GPU) for models that take no ``generator`` argument."""
    import torch

    torch.manual_seed(int(seed))
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(int(seed))
