"""``python:MODULE:FACTORY``: any generator object a function of yours returns, as a caption or image backend.

``unirag caption --generator python:mypkg.gen:make`` imports ``mypkg.gen``, calls ``make(**options)``
with the options it declares (``device``, ``dtype``, ``batch_size``, ... or all of them when it takes
``**kwargs``) and uses what it returns:

* a caption generator: a :class:`~unirag.generators.base.TextGenerator`, or any object with
  ``generate(messages, options) -> Generation`` (``generate_batch``, ``image_mode``,
  ``template_family``, ``sent_prompt(messages, options)``, ``config()`` and ``close()`` are used when present);
* an image generator: an :class:`~unirag.generators.images.base.ImageBackend`, or any object with
  ``generate(request: ImageRequest) -> GeneratedImage`` (``max_examples``, ``min_examples``, ``local``,
  ``check_size``, ``prompt_text``, ``config()``, ``identity()``, ``close()`` when present).

So a model unirag has no backend for (a research checkpoint, an in-house service) plugs into the runs,
resumption, metrics and reports unchanged.
"""

from __future__ import annotations

from typing import Any

from unirag.errors import ConfigError
from unirag.generators.base import Generation, GenerationOptions, TextGenerator
from unirag.generators.images.base import GeneratedImage, ImageBackend, ImageRequest
from unirag.generators.registry import declared_options, load_factory


class _Plugin:
    """The user's object (``inner``): each of the ``hooks`` it has replaces the base class's default."""

    kind = ""
    #: hook name -> how the object's value is taken (None: as it is)
    hooks: dict[str, Any] = {"close": None}

    def __init__(self, name: str, *, spec: str | None = None, **options: Any) -> None:
        self.spec = spec or f"python:{name}"
        factory = load_factory(name, self.kind)
        self.inner = factory(**declared_options(factory, options))
        if not callable(getattr(self.inner, "generate", None)):
            raise ConfigError(f"python:{name} returned a {type(self.inner).__name__}, which has no "
                              f"generate() method; a {self.kind} needs one")
        for hook, convert in self.hooks.items():
            value = getattr(self.inner, hook, None)
            if value is not None:
                setattr(self, hook, convert(value) if convert else value)

    def config(self) -> dict[str, Any]:
        extra = self.inner.config() if callable(getattr(self.inner, "config", None)) else {}
        return {**extra, "spec": self.spec, "backend": "python"}


class PluginTextGenerator(_Plugin, TextGenerator):
    """A caption generator built by a user factory (see the module docstring); without its own
    ``sent_prompt`` the prompt is shown as the rendered messages."""

    kind = "caption generator"
    hooks = {"close": None, "image_mode": None, "template_family": None, "batch_size": lambda v: int(v or 1),
             "generate_batch": None, "sent_prompt": None}
    batch_size = 1  # prompts per generate_batch call

    def generate(self, messages, options: GenerationOptions | None = None) -> Generation:
        return self.inner.generate(messages, options)

    def generate_batch(self, batch, options: GenerationOptions | None = None) -> list[Generation]:
        """The object's own replaces this; defined here so that runs hand a plugin batches of ``batch_size``."""
        return [self.generate(m, options) for m in batch]


class PluginImageGenerator(_Plugin, ImageBackend):
    """An image generator built by a user factory (see the module docstring)."""

    kind = "image generator"
    hooks = {"close": None, "max_examples": None, "min_examples": None, "local": bool, "templates": tuple,
             "prompt_text": None, "identity": None}
    local = True

    def check_size(self, width: int, height: int) -> None:
        super().check_size(width, height)
        if callable(getattr(self.inner, "check_size", None)):
            self.inner.check_size(width, height)

    def generate(self, request: ImageRequest) -> GeneratedImage:
        out = self.inner.generate(request)
        if not isinstance(out, GeneratedImage):  # a bare PIL image is accepted too
            out = GeneratedImage(image=out)
        return out
