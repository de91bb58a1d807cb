"""Merge several images into one, top to bottom, for models that accept a single image (LLaVA).

Paper §4.3: the merged image is as wide as the widest image and as tall as all heights together;
like the official code we leave a thin black separator between images so the model can tell them
apart. Images are pasted left-aligned on a black background, in order: examples [1]..[k], then the
query image [k+1].
"""

from __future__ import annotations

DEFAULT_SEPARATOR = 5
SEPARATOR_COLOR = (0, 0, 0)


def merge_vertically(images: list, separator: int = DEFAULT_SEPARATOR, fill: tuple[int, int, int] = SEPARATOR_COLOR):
    """PIL images as loaded (:func:`unirag.data.images.load_rgb`) -> one RGB image (width = max width,
    height = sum of heights + separators)."""
    from PIL import Image

    if not images:
        raise ValueError("merge_vertically needs at least one image")
    if separator < 0:
        raise ValueError("separator must be >= 0")
    rgb = [im.convert("RGB") for im in images]
    width = max(im.width for im in rgb)
    height = sum(im.height for im in rgb) + separator * (len(rgb) - 1)
    canvas = Image.new("RGB", (width, height), fill)
    y = 0
    for im in rgb:
        canvas.paste(im, (0, y))
        y += im.height + separator
    return canvas

