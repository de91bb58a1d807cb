"""How many photos OpenAI's CLIP transform and Hugging Face's ``CLIPImageProcessor`` crop differently.

OpenAI's ``_transform`` (torchvision ``CenterCrop``) places the crop at ``int(round((size - crop) / 2.0))``;
Hugging Face floors it, ``(size - crop) // 2``. After the shorter side is resized to ``n_px``, the two
disagree by one pixel when ``long - n_px`` is 3 mod 4. This prints, per input size, how many photos of a
folder that hits (read from the image headers only; nothing is decoded)::

    .venv/bin/python scripts/clip_crop_offsets.py ../shared/data/coco-val2017-mini/images [--sizes 224 336]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

from unirag.encoders.preprocess import center_crop_box, shorter_side_size

SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--sizes", type=int, nargs="+", default=[224, 336])
    args = ap.parse_args()
    files = sorted(p for p in args.folder.rglob("*") if p.suffix.lower() in SUFFIXES)
    if not files:
        raise SystemExit(f"no images under {args.folder}")
    sizes = []
    for f in files:
        with Image.open(f) as im:
            sizes.append(im.size)
    for n in args.sizes:
        off = 0
        for w, h in sizes:
            rw, rh = shorter_side_size(w, h, n)
            off += center_crop_box(rw, rh, n, "round") != center_crop_box(rw, rh, n, "floor")
        print(f"n_px={n}: {off} of {len(files)} photos ({100 * off / len(files):.1f}%) are cropped one pixel apart")


if __name__ == "__main__":
    main()
