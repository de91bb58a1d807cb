"""``ImageGenerator.generate(text, examples)`` takes examples as hits, pairs or ``(image, caption)``
tuples whose image is a path, a PIL image or encoded bytes, and the backend sees the same pixels."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

import unirag
from unirag.data.images import save_png_by_content


def test_example_images_in_memory_reach_the_backend_unchanged(demo, tmp_path):
    path = sorted(demo["images"].glob("*.jpg"))[0]
    pil = Image.open(path).convert("RGB")
    encoded = io.BytesIO()
    pil.save(encoded, format="PNG")
    generator = unirag.ImageGenerator("retrieval:top1")  # draws the first example's image
    expected = np.asarray(pil)
    for image in (path, str(path), pil, encoded.getvalue(), np.asarray(pil)):
        got = generator.generate("a photo", [(image, "its caption")])
        assert np.array_equal(np.asarray(got), expected), type(image).__name__


def test_in_memory_example_files_are_named_by_content(tmp_path):
    red = Image.new("RGB", (8, 8), (255, 0, 0))
    first = save_png_by_content(red, tmp_path)
    again = save_png_by_content(Image.new("RGB", (8, 8), (255, 0, 0)), tmp_path)
    blue = save_png_by_content(Image.new("RGB", (8, 8), (0, 0, 255)), tmp_path)
    assert first == again and first != blue
    assert np.array_equal(np.asarray(Image.open(first)), np.asarray(red))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({first.name, blue.name})  # no partial files left


def test_image_generator_loads_its_backend_with_the_profiles_options():
    """``unirag.ImageGenerator`` loads its backend as ``unirag generate-images`` does (pipelines/image_gen.py
    ``profile_options``): under ``image_top1 = top-candidate`` (the official profile) the top-1 baseline is
    loaded to draw noise for a query without a top image, as the official retriever metrics do."""
    official = unirag.ImageGenerator("retrieval:top1", profile="official")
    assert official.backend.noise is True
    assert unirag.ImageGenerator("retrieval:top1").backend.noise is False
