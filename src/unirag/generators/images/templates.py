"""Which prompt template each image backend uses, and the one rendering rule they share.

Wording lives in ``prompts/templates/image_*.txt`` (loaded and hashed by :mod:`unirag.prompts.templates`);
this module names them and renders the single-string few-shot form: the ``example`` section once
per example pair (numbered from 1) inside the ``prompt`` section.
"""

from __future__ import annotations

import functools

from unirag.prompts.templates import PromptTemplate, load_template

ZERO_SHOT = "image_zeroshot"
FEW_SHOT_OMNIGEN = "image_fewshot_omnigen"
FEW_SHOT_API = "image_fewshot_api"
FEW_SHOT_GEMINI = "image_fewshot_gemini"
ALL = (ZERO_SHOT, FEW_SHOT_OMNIGEN, FEW_SHOT_API, FEW_SHOT_GEMINI)

_REQUIRED = {ZERO_SHOT: ("prompt",), FEW_SHOT_OMNIGEN: ("example", "prompt"), FEW_SHOT_API: ("example", "prompt"),
             FEW_SHOT_GEMINI: ("intro", "example", "query")}


@functools.cache
def image_template(name: str) -> PromptTemplate:
    """Loaded once per process (the files are part of the package and do not change during a run)."""
    return load_template(name, required=_REQUIRED.get(name, ()))


def zero_shot_prompt(caption: str) -> str:
    return image_template(ZERO_SHOT).fill("prompt", caption=caption)


def render_listed(name: str, caption: str, example_captions: list[str]) -> str:
    """A single-string few-shot prompt: the ``example`` lines inside ``prompt``; zero-shot if none."""
    if not example_captions:
        return zero_shot_prompt(caption)
    tpl = image_template(name)
    lines = [tpl.fill("example", n=i, caption=c) for i, c in enumerate(example_captions, start=1)]
    return tpl.fill("prompt", num=len(example_captions), examples="\n".join(lines), caption=caption)
