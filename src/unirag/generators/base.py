"""What every generator backend offers, so that pipelines and X^R agents never see a wire format.

A backend receives the typed messages of :mod:`unirag.messages` and renders them itself. Failures
are raised as :class:`unirag.errors.BackendError` with ``retryable`` set, and the shared retry loop
(:mod:`unirag.runs.retry`) decides what to do; backends do not retry on their own.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from unirag.messages import Message, render_for_log


@dataclass
class Usage:
    # Backends that report only a total prompt-token count (images included) put it here.
    input_tokens: int = 0
    input_text_tokens: int = 0
    input_images: int = 0
    # Image share of ``input_tokens`` where the provider bills images per token (GPT-4o); an estimate
    # from the provider's published formula, since the API reports one total.
    input_image_tokens: int = 0
    output_tokens: int = 0


@dataclass
class Generation:
    text: str
    usage: Usage = field(default_factory=Usage)
    raw: dict[str, Any] | None = None  # backend-specific details worth keeping (finish reason, ...)


@dataclass
class GenerationOptions:
    max_tokens: int = 400  # the paper's setting
    #: None sends no temperature (the provider's or model's default; ``temperature = none`` setting)
    temperature: float | None = 0.0
    seed: int | None = None
    json_schema: dict[str, Any] | None = None  # ask for JSON output when the backend supports it
    #: None sends none. hf: the generate() keyword; OpenAI-compatible servers (vLLM): an extra body
    #: field (the OpenAI API itself has no such parameter); Gemini: not supported, not sent.
    repetition_penalty: float | None = None

    def given(self, *names: str) -> dict[str, Any]:
        """The named settings that are set: None sends none (the provider's or model's default, as the
        official code)."""
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


class Backend(ABC):  # noqa: B024 - the root of the three kinds below; each declares its abstract call
    """What every generator of either kind has: the spec it was made from, a config, a close."""

    #: The spec string it was made from, recorded in run manifests.
    spec: str = ""

    def config(self) -> dict[str, Any]:
        """Settings worth recording in the manifest (never secrets)."""
        return {"spec": self.spec}

    def close(self) -> None:  # noqa: B027 - optional hook; most backends hold nothing to release
        """Release clients or models."""


class TextGenerator(Backend):
    """Messages (interleaved images and text) -> text."""

    #: "single-image" backends get few-shot images merged into one picture; "multi-image" interleaved.
    image_mode: str = "multi-image"
    #: Prompt template family: "llava", "gpt4o" or "gemini" (see prompts/templates).
    template_family: str = "gpt4o"

    @abstractmethod
    def generate(self, messages: list[Message], options: GenerationOptions | None = None) -> Generation:
        """One call. Raises BackendError on failure."""

    def generate_batch(self, batch: list[list[Message]], options: GenerationOptions | None = None) -> list[Generation]:
        """Local models override this to batch; API backends are parallelised by the run loop instead."""
        return [self.generate(m, options) for m in batch]

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str:
        """The prompt as this backend sends it, for inspection (``OUT/prompts/NNN_qid.sent.txt``, what the
        official scripts' ``prompt_{idx}.txt`` files hold): here the messages as text, images as
        placeholders; backends that send a string or a JSON body override it to show exactly that (each
        image's base64 data shortened by :func:`body_for_log`; never a key or a header)."""
        return render_for_log(messages)


def body_for_log(body: Any) -> str:
    """A request body as JSON for :meth:`TextGenerator.sent_prompt`, each image's base64 data (a ``data:``
    URL's, an ``inlineData`` part's) shown as its length and hash: the bytes would make the file
    unreadable; the hash still tells two images apart."""
    def short(data: str) -> str:
        return f"<{len(data)} base64 chars, sha256 {hashlib.sha256(data.encode()).hexdigest()[:16]}>"

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            if isinstance(x.get("data"), str) and ("mimeType" in x or "mime_type" in x):
                return {**x, "data": short(x["data"])}
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, str):
            return re.sub(r"(data:[^;\"]+;base64,)([A-Za-z0-9+/=]+)",
                          lambda m: m.group(1) + short(m.group(2)), x)
        return x

    return json.dumps(walk(body), indent=2, ensure_ascii=False)


class ExampleCaptioner(Backend):
    """Captioners that need no prompt: they pick or combine the retrieved example captions.

    Not a :class:`TextGenerator` (they cannot answer a prompt), so code that holds one asks
    ``isinstance(g, ExampleCaptioner)`` instead of probing for attributes; both kinds go through
    :class:`unirag.Captioner`, which feeds each what it takes.
    """

    @abstractmethod
    def caption_from_examples(self, captions: Sequence[str]) -> Generation:
        """A caption from the examples' captions (best-ranked first). Raises BackendError if none."""


#: Anything :func:`unirag.generators.registry.load_generator` returns.
CaptionBackend = TextGenerator | ExampleCaptioner
