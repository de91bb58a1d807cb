"""``python:MODULE:FACTORY``: any generator object a function of yours returns, as a caption or image backend.

``unirag caption --generator python:mypkg.gen:make`` imports ``mypkg.gen``, calls ``make(**options)``
with the options it declares (``device``, ``dtype``, ``batch_size``, ... or all of them when it takes
``**kwargs``) and uses what it returns:

* a caption generator: a :class:`~unirag.generators.base.TextGenerator`, or any object with
  ``generate(messages, options) -> Generation`` (``generate_batch``, ``image_mode``,
  ``template_family``, ``sent_prompt(messages, options)``, ``config()`` and ``close()`` are used when present);
* an image generator: an :class:`~unirag.generators.images.base.ImageGenerator`, or any object with
  ``generate(request: ImageRequest) -> GeneratedImage`` (``max_examples``, ``min_examples``, ``local``,
  ``check_size``, ``prompt_text``, ``config()``, ``identity()``, ``close()`` when present).

So a model unirag has no backend for (a research checkpoint, an in-house service) plugs into the runs,
resumption, metrics and reports unchanged.
"""

from __future__ import annotations

from typing import Any

from unirag.errors import ConfigError
from unirag.generators.base import Generation, GenerationOptions, TextGenerator
from unirag.generators.images.base import GeneratedImage, ImageGenerator, ImageRequest
from unirag.generators.registry import declared_options, load_factory


class _Plugin:
    """The user's object (``inner``) and the hooks both kinds forward to it when it has them."""

    kind = ""

    def __init__(self, name: str, *, spec: str | None = None, **options: Any) -> None:
        self.spec = spec or f"python:{name}"
        factory = load_factory(name, self.kind)
        self.inner = factory(**declared_options(factory, options))
        if not callable(getattr(self.inner, "generate", None)):
            raise ConfigError(f"python:{name} returned a {type(self.inner).__name__}, which has no "
                              f"generate() method; a {self.kind} needs one")

    def config(self) -> dict[str, Any]:
        extra = self.inner.config() if callable(getattr(self.inner, "config", None)) else {}
        return {**extra, "spec": self.spec, "backend": "python"}

    def close(self) -> None:
        if callable(getattr(self.inner, "close", None)):
            self.inner.close()


class PluginTextGenerator(_Plugin, TextGenerator):
    """A caption generator built by a user factory (see the module docstring)."""

    kind = "caption generator"

    def __init__(self, name: str, *, spec: str | None = None, **options: Any) -> None:
        super().__init__(name, spec=spec, **options)
        self.image_mode = getattr(self.inner, "image_mode", "multi-image")
        self.template_family = getattr(self.inner, "template_family", "gpt4o")
        self.batch_size = int(getattr(self.inner, "batch_size", 1) or 1)  # prompts per generate_batch call

    def generate(self, messages, options: GenerationOptions | None = None) -> Generation:
        return self.inner.generate(messages, options)

    def generate_batch(self, batch, options: GenerationOptions | None = None) -> list[Generation]:
        if callable(getattr(self.inner, "generate_batch", None)):
            return self.inner.generate_batch(batch, options)
        return [self.generate(m, options) for m in batch]

    def sent_prompt(self, messages, options: GenerationOptions | None = None) -> str:
        """The plugin's own wire form of the prompt when it has one (``sent_prompt``), else the rendered messages."""
        if callable(getattr(self.inner, "sent_prompt", None)):
            return self.inner.sent_prompt(messages, options)
        return super().sent_prompt(messages, options)


class PluginImageGenerator(_Plugin, ImageGenerator):
    """An image generator built by a user factory (see the module docstring)."""

    kind = "image generator"

    def __init__(self, name: str, *, spec: str | None = None, **options: Any) -> None:
        super().__init__(name, spec=spec, **options)
        self.max_examples = getattr(self.inner, "max_examples", None)
        self.min_examples = getattr(self.inner, "min_examples", 0)
        self.local = bool(getattr(self.inner, "local", True))
        self.templates = tuple(getattr(self.inner, "templates", ()))

    def check_size(self, width: int, height: int) -> None:
        super().check_size(width, height)
        if callable(getattr(self.inner, "check_size", None)):
            self.inner.check_size(width, height)

    def prompt_text(self, request: ImageRequest) -> str:
        if callable(getattr(self.inner, "prompt_text", None)):
            return self.inner.prompt_text(request)
        return super().prompt_text(request)

    def generate(self, request: ImageRequest) -> GeneratedImage:
        out = self.inner.generate(request)
        if not isinstance(out, GeneratedImage):  # a bare PIL image is accepted too
            out = GeneratedImage(image=out)
        return out

    def identity(self) -> dict[str, Any]:
        return self.inner.identity() if callable(getattr(self.inner, "identity", None)) else {}
