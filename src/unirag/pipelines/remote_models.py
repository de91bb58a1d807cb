"""Local models that live on Ray workers, seen from the driver (see :mod:`unirag.runs.engine`).

A :class:`ModelRecipe` is what a worker needs to load a model (its kind, spec and options,
picklable); the driver never loads the model itself. What the run needs to know about the model on
the driver (its recorded config for the manifest, its prompt template family, which example counts
it takes) is reported by a worker that loaded it, and held by a :class:`RemoteModel` stand-in that
describes the model exactly as the loaded one would but cannot be called. So a Ray run writes the
same manifest and prompts as a local run of the same configuration, and a run started locally can
be resumed on Ray and back.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from unirag.errors import UniragError
from unirag.generators.base import TextGenerator
from unirag.generators.images.base import ImageBackend
from unirag.generators.registry import CAPTION, IMAGE, load_generator

if TYPE_CHECKING:
    from unirag.generators.base import GenerationOptions
    from unirag.messages import Message

#: What a worker reports about its loaded model besides spec and config (those the model has).
DESCRIBED = ("template_family", "image_mode", "batch_size", "local", "templates", "max_examples", "min_examples")


@dataclass(frozen=True)
class ModelRecipe:
    """Load generator ``spec`` with ``options`` in a worker: a caption/agent model (``kind`` "text")
    or an image model ("image"); ``device`` ``auto`` becomes the worker's (its GPU, else the CPU)."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)
    kind: str = "text"

    @property
    def key(self) -> str:
        return f"{self.kind}|" + json.dumps([self.spec, self.options], sort_keys=True, default=str)

    def load(self, device: str) -> Any:
        opts = dict(self.options)
        if opts.get("device") in (None, "", "auto"):
            opts["device"] = device
        return load_generator(self.spec, IMAGE if self.kind == "image" else CAPTION, **opts)

    def describe(self, model: Any) -> dict[str, Any]:
        info = {"spec": model.spec, "config": model.config(),
                **{n: getattr(model, n) for n in DESCRIBED if hasattr(model, n)}}
        if self.kind == "image":
            info["identity"] = model.identity()
            info["templates"] = list(info.get("templates") or ())
        return info


def sent_prompt_of(messages: list[Message], options: GenerationOptions | None, model: Any) -> str | None:
    """What a worker answers for :meth:`RemoteModel.sent_prompt`: its loaded model's wire form of
    the prompt (None: the model shows none), the text a local run of the same model saves."""
    sent = getattr(model, "sent_prompt", None)
    return sent(messages, options) if callable(sent) else None


class RemoteModel(TextGenerator, ImageBackend):
    """The driver's view of a model loaded on Ray workers, text or image (``info`` from
    :meth:`ModelRecipe.describe`; ``ask(question)``: ``question(model)`` answered by a worker, as
    :meth:`unirag.runs.engine.WorkerPool.ask`)."""

    def __init__(self, info: dict[str, Any], ask: Callable[[Callable[[Any], Any]], Any] | None = None) -> None:
        self.spec = info["spec"]
        self.info = info
        self._ask = ask
        for name in DESCRIBED:
            if info.get(name) is not None:
                setattr(self, name, tuple(info[name]) if name == "templates" else info[name])

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        raise UniragError(f"{self.spec} runs on Ray workers; this stand-in only describes it")

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str | None:
        """The prompt exactly as the model on the workers sends it: a worker renders it (the driver holds
        no model); without workers to ask, the rendered messages."""
        if self._ask is None:
            return super().sent_prompt(messages, options)
        return self._ask(functools.partial(sent_prompt_of, messages, options))

    def config(self) -> dict[str, Any]:
        return dict(self.info["config"])

    def identity(self) -> dict[str, Any]:
        return dict(self.info.get("identity") or {})
