"""Local models that live on Ray workers, seen from the driver (see :mod:`unirag.runs.engine`).

A *recipe* is what a worker needs to load a model (the spec and its options, picklable); the
driver never loads the model itself. What the run needs to know about the model on the driver (its
recorded config for the manifest, its prompt template family, which example counts it takes) is
reported by a worker that loaded it, and held by a *stand-in* backend: a
:class:`RemoteTextGenerator` or :class:`RemoteImageGenerator` that describes the model exactly as
the loaded one would but cannot be called. So a Ray run writes the same manifest and prompts as a
local run of the same configuration, and a run started locally can be resumed on Ray and back.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from unirag.errors import UniragError
from unirag.generators.base import Generation, GenerationOptions, TextGenerator
from unirag.generators.images.base import GeneratedImage, ImageGenerator, ImageRequest

if TYPE_CHECKING:
    from unirag.messages import Message


def _device(options: dict[str, Any], device: str) -> dict[str, Any]:
    """The worker's device for ``auto`` (its own GPU when Ray reserved one, else the CPU)."""
    opts = dict(options)
    if opts.get("device") in (None, "", "auto"):
        opts["device"] = device
    return opts


@dataclass(frozen=True)
class TextModelRecipe:
    """Load a caption/agent generator ``spec`` with ``options`` in a worker."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return "text|" + json.dumps([self.spec, self.options], sort_keys=True, default=str)

    def load(self, device: str) -> Any:
        from unirag.generators.registry import load_text_generator

        return load_text_generator(self.spec, **_device(self.options, device))

    def describe(self, model: Any) -> dict[str, Any]:
        return {"spec": model.spec, "config": model.config(), "template_family": getattr(model, "template_family", None),
                "image_mode": getattr(model, "image_mode", "multi-image"),
                "batch_size": int(getattr(model, "batch_size", 1) or 1)}


@dataclass(frozen=True)
class ImageModelRecipe:
    """Load an image generator ``spec`` with ``options`` in a worker."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return "image|" + json.dumps([self.spec, self.options], sort_keys=True, default=str)

    def load(self, device: str) -> Any:
        from unirag.generators.registry import load_image_generator

        return load_image_generator(self.spec, **_device(self.options, device))

    def describe(self, model: Any) -> dict[str, Any]:
        return {"spec": model.spec, "config": model.config(), "identity": model.identity(), "local": model.local,
                "templates": list(model.templates), "max_examples": model.max_examples,
                "min_examples": model.min_examples}


def _not_here(spec: str) -> UniragError:
    return UniragError(f"{spec} runs on Ray workers; this stand-in only describes it")


def sent_prompt_of(messages: list[Message], options: GenerationOptions | None, model: Any) -> str | None:
    """What a worker answers for :meth:`RemoteTextGenerator.sent_prompt`: its loaded model's wire form of
    the prompt (None: the model shows none), the text a local run of the same model saves."""
    sent = getattr(model, "sent_prompt", None)
    return sent(messages, options) if callable(sent) else None


class RemoteTextGenerator(TextGenerator):
    """The driver's view of a text generator loaded on Ray workers (``info`` from :meth:`TextModelRecipe.describe`;
    ``ask(question)``: ``question(model)`` answered by a worker, as :meth:`unirag.runs.engine.WorkerPool.ask`)."""

    def __init__(self, info: dict[str, Any], ask: Callable[[Callable[[Any], Any]], Any] | None = None) -> None:
        self.spec = info["spec"]
        self.info = info
        self._ask = ask
        if info.get("template_family"):
            self.template_family = info["template_family"]
        self.image_mode = info.get("image_mode", "multi-image")
        self.batch_size = info.get("batch_size", 1)

    def generate(self, messages, options=None) -> Generation:
        raise _not_here(self.spec)

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str | None:
        """The prompt exactly as the model on the workers sends it: a worker renders it (the driver holds
        no model); without workers to ask, the rendered messages."""
        if self._ask is None:
            return super().sent_prompt(messages, options)
        return self._ask(functools.partial(sent_prompt_of, messages, options))

    def config(self) -> dict[str, Any]:
        return dict(self.info["config"])


class RemoteImageGenerator(ImageGenerator):
    """The driver's view of an image generator loaded on Ray workers (``info`` from :meth:`ImageModelRecipe.describe`)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.spec = info["spec"]
        self.info = info
        self.local = bool(info.get("local", True))
        self.templates = tuple(info.get("templates") or ())
        self.max_examples = info.get("max_examples")
        self.min_examples = info.get("min_examples", 0)

    def generate(self, request: ImageRequest) -> GeneratedImage:
        raise _not_here(self.spec)

    def config(self) -> dict[str, Any]:
        return dict(self.info["config"])

    def identity(self) -> dict[str, Any]:
        return dict(self.info.get("identity") or {})
