"""Image generators by spec string: ``PREFIX:NAME``.

``diffusers:<hub id or local dir>``   a local diffusers pipeline (text-only -> zero-shot; OmniGen-style
                                       pipelines with reference images -> few-shot too)
``openai-image:gpt-image-1``          OpenAI images API (few-shot through images.edit)
``gemini-image:<model>``              Gemini image generation (few-shot via interleaved images)
``retrieval:top1``                    the top-1 retrieved example's image (offline baseline)

Options are keyword arguments; each backend takes those its constructor declares and ignores the
rest, so one CLI option set serves every backend. Backends are imported only when selected.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from unirag.errors import ConfigError
from unirag.generators.images.base import ImageGenerator

# prefix -> ("module:class", what NAME means)
BACKENDS: dict[str, tuple[str, str]] = {
    "diffusers": ("unirag.generators.images.diffusers_backend:DiffusersImageGenerator",
                  "hub id or local pipeline dir, e.g. diffusers:./my-sd-pipeline"),
    "openai-image": ("unirag.generators.images.openai_images:OpenAIImageGenerator",
                     "model name, e.g. openai-image:gpt-image-1"),
    "gemini-image": ("unirag.generators.images.gemini_images:GeminiImageGenerator",
                     "model name, e.g. gemini-image:gemini-2.5-flash-image"),
    "retrieval": ("unirag.generators.images.retrieval_baseline:RetrievalImageGenerator", "top1"),
}


def parse_image_spec(spec: str) -> tuple[str, str]:
    """``'openai-image:gpt-image-1'`` -> ``('openai-image', 'gpt-image-1')``; unknown prefixes raise."""
    prefix, sep, name = str(spec).partition(":")
    prefix = prefix.strip().lower()
    if not sep or prefix not in BACKENDS:
        valid = "; ".join(f"{p}:<{what}>" for p, (_, what) in BACKENDS.items())
        raise ConfigError(f"unknown image generator spec {spec!r}; valid forms: {valid}")
    name = name.strip()
    if not name:
        raise ConfigError(f"image generator spec {spec!r} lacks a name after '{prefix}:' ({BACKENDS[prefix][1]})")
    return prefix, name


def load_image_generator(spec: str, **opts: Any) -> ImageGenerator:
    """Build the image generator a spec names. Options set to None count as not given.

    Options: ``device``, ``dtype`` (diffusers); ``base_url``, ``timeout``, ``quality``,
    ``api_key_env`` (APIs). Keys come from the environment, never from options.
    """
    prefix, name = parse_image_spec(spec)
    module_name, attr = BACKENDS[prefix][0].split(":")
    cls = getattr(importlib.import_module(module_name), attr)
    params = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in opts.items() if v is not None and k in params and k != "self"}
    return cls(name, spec=f"{prefix}:{name}", **kwargs)
