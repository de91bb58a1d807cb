"""``Pool.from_pairs`` gives one image candidate per distinct image (same path or same file content),
carrying the captions of every tuple that names it: indexed once, it comes back once."""

from __future__ import annotations

import shutil
from pathlib import Path

import unirag
from unirag.data.records import Modality


def test_one_image_candidate_per_distinct_image(coco_mini: Path, tmp_path: Path) -> None:
    photos = sorted((coco_mini / "images").glob("*.jpg"))[:2]
    twin = tmp_path / "same-photo-other-name.jpg"
    shutil.copyfile(photos[0], twin)
    pool = unirag.Pool.from_pairs([(photos[0], "a first caption"), (photos[1], ["b one", "b two"]),
                                   (photos[0], ["a second caption"]), (twin, "a third caption")])
    images = [c for c in pool if c.modality is Modality.IMAGE]
    texts = [c for c in pool if c.modality is Modality.TEXT]
    assert [c.img_path for c in images] == [str(photos[0]), str(photos[1])]
    by_source = {c.source_id: [] for c in images}
    for t in texts:
        by_source[t.source_id].append(t.txt)
    assert by_source[images[0].source_id] == ["a first caption", "a second caption", "a third caption"]
    assert by_source[images[1].source_id] == ["b one", "b two"]
    assert [c.did for c in pool] == ["item:img:0", "item:txt:0:0", "item:txt:0:1", "item:txt:0:2",
                                     "item:img:1", "item:txt:1:0", "item:txt:1:1"]


def test_in_memory_images_with_the_same_pixels_are_one_candidate(tmp_path: Path) -> None:
    from PIL import Image

    red = Image.new("RGB", (8, 8), (200, 10, 10))
    pool = unirag.Pool.from_pairs([(red, "red"), (red.copy(), "also red"), (Image.new("RGB", (8, 8)), "black")],
                                  images_dir=tmp_path)
    assert sum(c.modality is Modality.IMAGE for c in pool) == 2
    assert len(pool) == 5
