"""Clean a generated caption before it is scored, so the prompt's framing is not counted as n-gram mismatches.

LLaVA prompts number the images, so answers come back as ``Caption [3]: A dog ...``; chat models add
``Caption:`` or quote the sentence. The official evaluation removes ``Caption [n]: `` (its
``remove_caption_prefix``); :func:`strip_answer_prefix` does so a little more generally: surrounding
whitespace; one leading label (``Caption``, ``Answer``, ``Output``, ``Response`` or ``Description``, any
case, optionally bold, ``for/of the (query) image`` and a number ``[3]``/``3``/``#3``, then ``:`` or ``-``;
or a bare ``[3]:``); one pair of surrounding quotes; repeated until nothing changes. Case, punctuation
and inner text are left to the PTB tokenizer, as the COCO caption toolkit expects.
"""

from __future__ import annotations

import re

_LABEL = re.compile(
    r"""^(?:\*\*)?
        (?:caption|answer|output|response|description)
        (?:\s+(?:for|of)\s+(?:the\s+)?(?:query\s+)?image)?
        (?:\s*(?:\[\s*\d+\s*\]|\#?\d+))?
        \s*(?:\*\*)?\s*[:\-]\s*(?:\*\*)?\s*""",
    re.IGNORECASE | re.VERBOSE,
)
_BARE_NUMBER = re.compile(r"^\[\s*\d+\s*\]\s*[:\-]\s*")
_QUOTES = [('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("`", "`")]


def strip_answer_prefix(text: str) -> str:
    """The caption without answer labels (``Caption [3]:``) and surrounding quotes (see module doc)."""
    previous = None
    while previous != text:  # one label, then one pair of quotes, until nothing changes
        previous, text = text, text.strip()
        m = _LABEL.match(text) or _BARE_NUMBER.match(text)
        if m:
            text = text[m.end():].strip()
        for left, right in _QUOTES:
            if len(text) >= 2 and text.startswith(left) and text.endswith(right):
                text = text[len(left):-len(right)].strip()
                break
    return text


_OFFICIAL_PREFIX = re.compile(r"^Caption \[\d+\]: ")


def strip_official_prefix(text: str) -> str:
    """The official UniRAG clean-up only: surrounding whitespace, then one leading ``Caption [n]: ``
    (castorini/UniRAG src/unirag/eval_caption_generation.py@e9a4e00:59-65, ``remove_caption_prefix``)."""
    return _OFFICIAL_PREFIX.sub("", text.strip(), count=1)
