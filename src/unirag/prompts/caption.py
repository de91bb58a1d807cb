"""Build the captioning prompt (zero-shot or few-shot) as typed messages, from a template file.

The template's ``layout`` section says in which order the parts go (GPT-4o: system, examples,
query image, instruction; Gemini: instruction first; LLaVA: one merged image, then the system text
and the instruction in the user turn). Backends only render the resulting messages to their wire
format, so the same prompt reaches every model in its family unchanged.

For single-image (``merged_image``) layouts (LLaVA) the examples' images and the query image are
merged top to bottom into one (paper §4.3: as wide as the widest, as tall as all together; like the
official code with a thin black separator so the model can tell them apart), the captions are
numbered [1]..[k] and the query image is named [k+1]; the official UniRAG code repeated [k] for the
query line and ended the example list with a line break, which ``caption_prompts = official``
reproduces (:mod:`unirag.prompts.official`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirag.data.images import ImageLike, load_rgb, png_bytes
from unirag.errors import ConfigError, InputError
from unirag.messages import ImagePart, Message, Part, TextPart, with_decoded
from unirag.prompts.templates import PromptTemplate, load_template
from unirag.retrieval.results import Pair

LAYOUT_TOKENS = frozenset({"system_message", "system_inline", "examples", "query_image", "merged_image",
                           "instruction"})
REQUIRED_SECTIONS = ("layout", "system", "zero_shot", "few_shot", "example_caption")


@dataclass
class CaptionPrompt:
    messages: list[Message]
    merged_image: object | None = None  # the PIL image sent to single-image models (saved for inspection)


def caption_template(family: str, directory: str | Path | None = None) -> PromptTemplate:
    """The family's template, its layout checked here once (a prompt reads it as it is)."""
    tpl = load_template(f"caption_{family}", directory, required=REQUIRED_SECTIONS)
    tokens = tpl.text("layout").split()
    unknown = [t for t in tokens if t not in LAYOUT_TOKENS]
    if unknown:
        raise ConfigError(f"{tpl.path}: unknown layout item(s) {', '.join(unknown)}; "
                          f"expected some of {', '.join(sorted(LAYOUT_TOKENS))}")
    if "instruction" not in tokens:
        raise ConfigError(f"{tpl.path}: layout must contain 'instruction'")
    if ("query_image" in tokens) == ("merged_image" in tokens):
        raise ConfigError(f"{tpl.path}: layout needs exactly one of query_image (interleaved) or merged_image")
    if "merged_image" in tokens and "examples" in tokens:
        raise ConfigError(f"{tpl.path}: a merged_image layout lists its examples in the instruction, "
                          "not as 'examples'")
    if "merged_image" in tokens and "query_caption" not in tpl.sections:
        raise ConfigError(f"{tpl.path}: a merged_image layout needs a '### query_caption' section")
    return tpl


def merge_vertically(images: list, separator: int = 5):
    """PIL images as loaded (:func:`unirag.data.images.load_rgb`) -> one RGB image (width = max width,
    height = sum of heights + separators), each pasted left-aligned in order."""
    from PIL import Image

    if not images:
        raise ValueError("merge_vertically needs at least one image")
    rgb = [im.convert("RGB") for im in images]
    height = sum(im.height for im in rgb) + separator * (len(rgb) - 1)
    canvas = Image.new("RGB", (max(im.width for im in rgb), height))  # black
    for im, y in zip(rgb, itertools.accumulate((im.height + separator for im in rgb), initial=0), strict=False):
        canvas.paste(im, (0, y))
    return canvas


def _image_part(image: ImageLike, label: str, loading: str) -> ImagePart:
    """Fail while building the prompt (naming the file), not later inside a backend's encoder."""
    if isinstance(image, str | Path) and not Path(image).is_file():
        raise InputError("image file not found", path=image)
    return ImagePart.from_image(image, label=label, loading=loading)


def build_caption_prompt(tpl: PromptTemplate, query_image: ImageLike, examples: Sequence[Pair],
                         query_label: str = "query", ahead: Mapping[str, Any] | None = None,
                         loading: str = "normalised") -> CaptionPrompt:
    """Messages for one query. ``examples`` empty = zero-shot (the template's Figure 2 wording).
    ``ahead``: image files already decoded (path -> image) and ``loading``: how the images are
    decoded (the ``image_loading`` setting), see :func:`unirag.data.images.load_rgb`."""
    layout = tpl.text("layout").split()
    merged = "merged_image" in layout
    system = tpl.text("system").strip()
    k = len(examples)
    if k == 0:
        instruction = tpl.text("zero_shot")
    elif not merged:
        instruction = tpl.fill("few_shot", num=k)
    else:
        lines = [tpl.fill("example_caption", n=i, caption=s.caption) for i, s in enumerate(examples, start=1)]
        lines.append(tpl.fill("query_caption", n=k + 1, caption_num=k))
        instruction = tpl.fill("few_shot", num=k, image_num=k + 1, caption_num=k, examples="\n".join(lines))
    if "system_inline" in layout and system:  # wherever the layout places it
        instruction = f"{system}\n{instruction}"
    messages: list[Message] = []
    parts: list[Part] = []
    merged_image = None
    for token in layout:
        if token == "system_message" and system:
            messages.append(Message("system", [TextPart(system)]))
        elif token == "examples":
            for i, s in enumerate(examples, start=1):
                parts.append(_image_part(s.image, s.label or f"example {i}", loading))
                parts.append(TextPart(tpl.fill("example_caption", n=i, caption=s.caption)))
        elif token == "query_image" or (token == "merged_image" and not examples):
            parts.append(_image_part(query_image, query_label, loading))
        elif token == "merged_image":
            images = [load_rgb(im, ahead=ahead, loading=loading)
                      for im in [*(s.image for s in examples), query_image]]
            merged_image = merge_vertically(images)
            labels = [s.label or f"example {i}" for i, s in enumerate(examples, start=1)] + [query_label]
            parts.append(ImagePart(data=png_bytes(merged_image), mime="image/png",
                                   label="merged: " + " | ".join(labels)))
        elif token == "instruction":
            parts.append(TextPart(instruction))
    messages.append(Message("user", parts))  # a file decoded ahead carries its decoded image
    return CaptionPrompt(messages=with_decoded(messages, ahead), merged_image=merged_image)


