"""A pool made from images held in memory (PIL images, bytes): indexed, searched, and its hits show
exactly those pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import unirag


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_pool_of_in_memory_images_indexes_and_returns_the_same_pixels(demo, tmp_path):
    paths = sorted(demo["images"].glob("*.jpg"))[:3]
    pils = [Image.open(p).convert("RGB") for p in paths]
    buf = io.BytesIO()
    pils[1].save(buf, format="PNG")
    captions = ["a red double decker bus", "a plate of food on a table", "a man riding a wave on a surfboard"]
    pool = unirag.Pool.from_pairs([(pils[0], captions[0]), (buf.getvalue(), captions[1]), (paths[2], captions[2])],
                                  images_dir=tmp_path / "images")
    assert len(list((tmp_path / "images").glob("*.png"))) == 2  # the third image stays where it is
    index = unirag.Index.build(pool, tmp_path / "index")
    retriever = unirag.Retriever(index)
    for i, (pil, caption) in enumerate(zip(pils, captions, strict=True)):
        hits = retriever.search(image=pil, k=3, modality="image")
        assert hits[0].did == f"item:img:{i}"  # the image finds itself
        by_text = retriever.search(text=caption, k=3)
        shown = {h.pair.image for h in by_text if h.pair is not None}
        assert shown and all(p.is_absolute() and p.is_file() for p in shown)
    for i, pil in enumerate(pils):
        stored = unirag.Index.open(tmp_path / "index").pool.image_file(f"item:img:{i}")
        assert np.array_equal(np.asarray(Image.open(stored).convert("RGB")), np.asarray(pil))


def test_in_memory_images_need_a_folder(tmp_path):
    with pytest.raises(unirag.ConfigError, match="images_dir"):
        unirag.Pool.from_pairs([(Image.new("RGB", (4, 4)), "a black square")])
