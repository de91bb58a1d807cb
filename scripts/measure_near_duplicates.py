"""Measure the near-duplicate guard's distances on real COCO photos and captions (threshold choice).

For every photo of ``coco-val2017-mini`` it makes copies a web pool would hold (resized to 50 %,
75 % and 33 %; JPEG re-encoded at quality 95, 75, 50 and 30; a 5 % border crop; a resize + q50
re-encode) and prints the dHash Hamming distance distribution of copies to their original against
all pairs of *distinct* photos. For captions it prints the word-set Jaccard similarity of copies
(case/punctuation changed, one article dropped, a full stop added) against distinct captions of
the *same* photo (the hardest distinct case) and of different photos. The defaults in
``unirag.retrieval.selection.Thresholds`` sit in the gap between the two distributions
(``docs/selection.md`` has the numbers).

    .venv/bin/python scripts/measure_near_duplicates.py /work/shared/data/coco-val2017-mini
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from unirag.retrieval.near_duplicates import caption_similarity, dhash, hamming


def copies(im: Image.Image) -> dict[str, Image.Image]:
    def jpeg(x: Image.Image, q: int) -> Image.Image:
        buf = io.BytesIO()
        x.save(buf, "JPEG", quality=q)
        return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")

    w, h = im.size
    out = {f"resize{int(s * 100)}": im.resize((max(1, int(w * s)), max(1, int(h * s))), Image.Resampling.BILINEAR)
           for s in (0.5, 0.75, 0.33)}
    out.update({f"jpeg{q}": jpeg(im, q) for q in (95, 75, 50, 30)})
    dx, dy = int(w * 0.05), int(h * 0.05)
    out["crop5"] = im.crop((dx, dy, w - dx, h - dy))
    out["resize50+jpeg50"] = jpeg(out["resize50"], 50)
    return out


def caption_copies(text: str) -> list[str]:
    words = text.split()
    dropped = [w for w in words if w.lower() not in ("a", "an", "the")]
    return [text.upper(), text.rstrip(".") + ".", " ".join(dropped) if len(dropped) < len(words) else text,
            text.replace(",", "")]


def percentiles(values: list[float]) -> str:
    a = np.asarray(values, dtype=float)
    return (f"n={len(a)} min={a.min():.3g} p1={np.percentile(a, 1):.3g} p50={np.median(a):.3g} "
            f"p99={np.percentile(a, 99):.3g} max={a.max():.3g}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="the coco-val2017-mini folder (captions.jsonl, images/)")
    args = ap.parse_args(argv)
    items = [json.loads(line) for line in (args.data / "captions.jsonl").read_text().splitlines() if line.strip()]
    originals, dup = [], {}
    for it in items:
        im = Image.open(args.data / it["image"]).convert("RGB")
        h = dhash(im)
        originals.append(h)
        for name, c in copies(im).items():
            dup.setdefault(name, []).append(hamming(h, dhash(c)))
    distinct = [hamming(a, b) for a, b in itertools.combinations(originals, 2)]
    print(f"images: {len(items)} photos")
    for name, d in dup.items():
        print(f"  copy {name:16s} {percentiles(d)}")
    print(f"  all copies          {percentiles([x for d in dup.values() for x in d])}")
    print(f"  distinct photos     {percentiles(distinct)}")
    for t in (6, 8, 10, 12):
        caught = np.mean([x <= t for d in dup.values() for x in d])
        false = np.mean([x <= t for x in distinct])
        print(f"  threshold {t:2d}: copies caught {caught:.3%}, distinct pairs flagged {false:.4%}")

    same, other, copy = [], [], []
    for it in items:
        caps = it["captions"]
        same += [caption_similarity(a, b) for a, b in itertools.combinations(caps, 2)]
        copy += [caption_similarity(c, x) for c in caps for x in caption_copies(c)]
    for a, b in itertools.combinations(range(len(items)), 2):
        other.append(caption_similarity(items[a]["captions"][0], items[b]["captions"][0]))
    print("captions:")
    print(f"  copies                       {percentiles(copy)}")
    print(f"  distinct, same photo         {percentiles(same)}")
    print(f"  distinct, different photos   {percentiles(other)}")
    for t in (0.6, 0.7, 0.8, 0.9):
        print(f"  threshold {t:.1f}: copies caught {np.mean([x >= t for x in copy]):.3%}, same-photo captions "
              f"flagged {np.mean([x >= t for x in same]):.3%}, other-photo captions flagged "
              f"{np.mean([x >= t for x in other]):.4%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
