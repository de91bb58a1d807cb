"""Near-duplicate tests for the leakage guard: perceptual image hashes and caption similarity.

A few-shot example leaks the answer when its image is a copy of the query image (re-encoded,
resized, lightly cropped: common in web-scale pools that merge datasets) or its caption is a copy
of one of the query's reference captions. Exact ids do not catch those copies, so the guard
compares content:

* **Images**: a 64-bit difference hash (dHash: the image in grey at 9x8 pixels, one bit per
  horizontal neighbour pair telling which is brighter). Resizing and JPEG re-encoding barely move
  it; different photos differ in about half of the bits. Two images are near-duplicates when the
  Hamming distance of their hashes is at most a threshold (see ``docs/selection.md`` for how the
  default was measured on real COCO photos). Written here with PIL and numpy (no extra dependency).
* **Captions**: the Jaccard similarity of their word sets after case and punctuation folding.
  Different human captions of the same photo share words but rarely most of them; a copy with a
  changed article or punctuation shares nearly all.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def dhash(image: Any) -> int:
    """The 64-bit difference hash of an image (a path, PIL image, encoded bytes or uint8 array)."""
    from PIL import Image

    from unirag.data.images import load_rgb

    if isinstance(image, str | Path):
        with Image.open(image) as im:
            im.draft("L", (64, 64))  # JPEG: decode at reduced size (much faster, same hash scale)
            grey = im.convert("L")
    else:
        grey = load_rgb(image).convert("L")
    small = np.asarray(grey.resize((9, 8), Image.Resampling.LANCZOS), dtype=np.int16)
    bits = (small[:, 1:] > small[:, :-1]).ravel()
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two hashes."""
    return (a ^ b).bit_count()


@lru_cache(maxsize=65536)
def caption_words(text: str | None) -> frozenset[str]:
    """The set of words of a caption, case- and punctuation-folded (cached: the guard asks for the same
    pool captions search after search)."""
    return frozenset(w.casefold() for w in _WORD.findall(text or ""))


def caption_key(text: str | None) -> str:
    """A caption after normalisation (case, punctuation, spacing): equal keys count as one caption."""
    return " ".join(w.casefold() for w in _WORD.findall(text or ""))


def caption_similarity(a: str | frozenset[str] | None, b: str | frozenset[str] | None) -> float:
    """Jaccard similarity of two captions' word sets (1.0: the same words)."""
    wa = a if isinstance(a, frozenset) else caption_words(a)
    wb = b if isinstance(b, frozenset) else caption_words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


@cache
def hash_of(path: str | Path | None) -> int | None:
    """The dHash of an image file, computed once per process (a file's hash does not depend on the
    query). An unreadable file has no hash (None): the guard cannot judge it and does not flag it."""
    try:
        return dhash(path) if path is not None else None
    except (OSError, ValueError, SyntaxError):
        return None


@cache
def digest_of(path: str | Path | None) -> str | None:
    """SHA-256 of the file's bytes (same content under another name is the same image), once per process."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path is not None else None
    except OSError:
        return None
