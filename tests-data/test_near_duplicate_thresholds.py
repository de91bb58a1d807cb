"""The near-duplicate guard's default thresholds on all 159 real COCO photos of coco-val2017-mini:
every resized or re-encoded copy is within the image threshold, every pair of distinct photos
beyond it; caption copies reach the caption threshold, captions of other photos (almost) never.
(``scripts/measure_near_duplicates.py`` prints the full distributions; docs/selection.md has them.)"""

from __future__ import annotations

import io
import itertools
import json

from PIL import Image

from unirag.retrieval.near_duplicates import caption_similarity, dhash, hamming
from unirag.retrieval.selection import Thresholds


def test_image_hash_threshold_separates_copies_from_distinct_photos(coco_mini) -> None:
    limit = Thresholds().image_hash
    items = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines() if x.strip()]
    hashes = []
    for it in items:
        with Image.open(coco_mini / it["image"]) as im:
            im = im.convert("RGB")
        h = dhash(im)
        hashes.append(h)
        for scale, quality in ((0.5, 60), (0.75, 90), (0.33, 30)):
            small = im.resize((int(im.width * scale), int(im.height * scale)), Image.Resampling.BILINEAR)
            buf = io.BytesIO()
            small.save(buf, "JPEG", quality=quality)
            assert hamming(h, dhash(buf.getvalue())) <= limit, (it["image"], scale, quality)
    assert min(hamming(a, b) for a, b in itertools.combinations(hashes, 2)) > limit


def test_caption_threshold_catches_copies_not_other_photos_captions(coco_mini) -> None:
    limit = Thresholds().caption
    items = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines() if x.strip()]
    for it in items:
        for c in it["captions"]:
            assert caption_similarity(c, c.upper().rstrip(".") + ".") >= limit
    first = [it["captions"][0] for it in items]
    flagged = sum(caption_similarity(a, b) >= limit for a, b in itertools.combinations(first, 2))
    assert flagged <= 2  # of 12,561 pairs of different photos' captions
