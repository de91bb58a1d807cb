"""``unirag.ImageGenerator``: one picture from a caption, zero-shot or with example pairs.

The public face of the image backends (:mod:`unirag.generators.images`): it takes examples in the
forms :meth:`unirag.Retriever.search` returns, fills in the picture settings (the paper's LaVIT
defaults), and returns the PIL image. The image run (:mod:`unirag.pipelines.image_gen`) makes the
same request per query, so a notebook and ``unirag generate-images`` draw the same picture.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from unirag.data.images import save_png_by_content
from unirag.errors import ConfigError, InputError
from unirag.generators.images.base import (
    DEFAULT_HEIGHT,
    DEFAULT_SEED,
    DEFAULT_WIDTH,
    GeneratedImage,
    ImageBackend,
    ImageRequest,
)
from unirag.generators.registry import IMAGE, load_generator, parse_spec, profile_options
from unirag.pipelines.captioner import LazyBackend, _check_arg_types, to_pairs
from unirag.pipelines.image_gen import picture_settings
from unirag.profiles import resolve
from unirag.runs.retry import call_with_retry


class ImageGenerator(LazyBackend):
    """Text-to-image with optional example image-caption pairs (UniRAG's generation task).

    ``generator``: a spec (``diffusers:HUB_ID_OR_DIR``, ``openai-image:gpt-image-1``,
    ``gemini-image:MODEL``, ``retrieval:top1``) or a backend object; ``options`` go to the backend
    (``device``, ``dtype``, ``base_url``, ``timeout``, ``quality``, ...). Picture settings default
    to the paper's (1024x1024, 25 steps, guidance 4.0, seed 1234). ``images_root``: the folder
    relative example image paths are relative to. An option no backend takes raises
    :class:`~unirag.errors.ConfigError` naming it and the known ones. Transient errors (429, 5xx,
    timeouts) are retried as in runs: ``max_attempts`` tries (default 6) or ``retry=`` a
    :class:`unirag.runs.retry.RetryPolicy`.
    ``steps``/``guidance`` None: the generator's default under ``profile`` (a profile name or
    :class:`unirag.profiles.Settings`; with ``"official"`` Emu2-Gen gets its pipeline's 50 steps and
    guidance 3.0).
    """

    OWN_OPTIONS = ("width", "height", "steps", "guidance", "seed", "images_root", "max_attempts", "retry",
                   "profile")
    OPTIONS_KEY = "options"

    def __init__(self, generator: str | ImageBackend, *, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                 steps: int | None = None, guidance: float | None = None, seed: int = DEFAULT_SEED,
                 images_root: str | Path | None = None, max_attempts: int | None = None, retry: Any = None,
                 profile: Any = None, **options: Any) -> None:
        _check_arg_types(width=(width, int), height=(height, int), steps=(steps, int | None),
                         guidance=(guidance, int | float | None), seed=(seed, int),
                         images_root=(images_root, str | Path | None))
        self._open(generator, options, ImageBackend, lambda spec: parse_spec(spec, IMAGE),
                   "a spec (e.g. 'retrieval:top1') or an image backend", max_attempts, retry)
        self.profile = resolve(profile)
        self.settings = picture_settings(self.spec, self.profile, width, height, steps, guidance, seed)
        self.images_root = images_root
        self.options = {k: v for k, v in options.items() if v is not None}

    def _load_backend(self) -> ImageBackend:  # LazyBackend: loaded on first use, released on close
        # the options the profile implies (official seeding, the top-1 baseline's noise), as the image run loads it
        backend = load_generator(self.spec, IMAGE, **profile_options(self.spec, self.profile, self.options, IMAGE))
        backend.check_size(self.settings["width"], self.settings["height"])
        return backend

    def request(self, text: str, examples: Iterable[Any] = (), *, qid: str = "query") -> ImageRequest:
        """The backend request for ``text`` and ``examples`` (checked against what the backend takes).

        The backends hand example images to their models as files (LaVIT and Emu2 read paths), so an
        in-memory example image is saved once as a lossless PNG named by its content hash, in
        ``unirag-examples`` in the system temp folder: the backend sees exactly these pixels.
        """
        if not isinstance(text, str):
            raise InputError(f"expected a caption string, got {type(text).__name__}", field="text")
        if not text.strip():
            raise ConfigError("generate() needs a non-empty caption text")
        folder = Path(tempfile.gettempdir()) / "unirag-examples"
        pairs = [p if p.pixels is None else replace(p, img_path=str(save_png_by_content(p.pixels, folder)), pixels=None)
                 for p in to_pairs(examples, self.images_root)]
        self.backend.check_k(len(pairs))
        return ImageRequest(qid=qid, caption=text, examples=pairs, **self.settings)

    def generate_result(self, text: str, examples: Iterable[Any] = (), *, qid: str = "query") -> GeneratedImage:
        """Like :meth:`generate`, with the usage and backend details (``.image``, ``.usage``, ``.meta``)."""
        request = self.request(text, examples, qid=qid)
        return call_with_retry(lambda: self.backend.generate(request), self.retry)[0]

    def generate(self, text: str, examples: Iterable[Any] = ()):
        """One RGB PIL image for ``text``. ``examples``: :class:`unirag.Hits`, hits, pairs or
        ``(image, caption)`` tuples (image: a path, PIL image, bytes or uint8 array), best first
        (none: zero-shot)."""
        return self.generate_result(text, examples).image

    def to_dict(self) -> dict[str, Any]:
        """Settings that rebuild an equal generator with :meth:`from_dict` (never secrets)."""
        return {"generator": self.spec, **self.settings,
                "images_root": str(self.images_root) if self.images_root else None,
                "max_attempts": self.retry.max_attempts, "options": dict(self.options),
                "profile": self.profile.to_dict()}

