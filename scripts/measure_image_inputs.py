"""Cosine of awkward copies of real photos to their upright 8-bit originals, with the offline encoder.

For each photo: an EXIF-rotated phone copy (orientation 6), a 16-bit grey PNG (against the 8-bit
grey PNG of the same picture) and, for white-background product shots, a copy whose background is
cut out (alpha 0, hidden colour black). Measured where images enter unirag:

* index build  - ``unirag.Index.build`` of originals and copies; searching with the original, the
  copy's stored vector scores its cosine (flat inner-product index of unit vectors);
* search       - ``Retriever.search(image=copy)``: the original's score;
* upload       - the service's upload check (``unirag.serve.uploads.check_image``) decodes the
  copy; cosine of its embedding to the original's.

Run against any checkout (``PYTHONPATH=OTHER/src`` measures another version with the same script)::

    .venv/bin/python scripts/measure_image_inputs.py [--photos 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # image_variants: the same makers the tests use


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photos", type=int, default=10, help="photos (and product shots) per kind")
    args = parser.parse_args()
    import unirag
    from image_variants import exif_rotated, grey_8bit, grey_16bit, transparent_background
    from unirag.data.records import Candidate, Modality
    from unirag.serve.uploads import check_image

    photos = sorted((REPO / "src/unirag/demo/data/images").glob("*.jpg"))[: args.photos]
    products = sorted((REPO / "tests/fixtures/myntra/images").glob("*.jpg"))[: args.photos]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "images"
        root.mkdir()
        pairs: dict[str, list[tuple[str, str]]] = {"exif-rotated": [], "16-bit": [], "transparent": []}
        for i, p in enumerate(photos):
            (root / f"p{i}.jpg").write_bytes(p.read_bytes())
            exif_rotated(p, root / f"p{i}-phone.jpg")
            grey_8bit(p, root / f"p{i}-g8.png")
            grey_16bit(p, root / f"p{i}-g16.png")
            pairs["exif-rotated"].append((f"p{i}.jpg", f"p{i}-phone.jpg"))
            pairs["16-bit"].append((f"p{i}-g8.png", f"p{i}-g16.png"))
        for i, p in enumerate(products):
            (root / f"s{i}.jpg").write_bytes(p.read_bytes())
            transparent_background(p, root / f"s{i}-cut.png")
            pairs["transparent"].append((f"s{i}.jpg", f"s{i}-cut.png"))
        names = sorted(f.name for f in root.iterdir())
        pool = unirag.Pool.from_records([Candidate(did=n, modality=Modality.IMAGE, img_path=n) for n in names],
                                        images_root=root)
        index = unirag.Index.build(pool, Path(tmp) / "index")
        retriever = unirag.Retriever(index).warm_up()
        encoder = retriever.encoder
        k = len(names)

        def score(query, did: str) -> float:
            return next(h.score for h in retriever.search(image=query, k=k, modality="image") if h.did == did)

        def upload(original: str, copy: str) -> float:
            limits = {"max_bytes": 50 << 20, "max_pixels": 40_000_000}
            a, b = encoder.encode_images([check_image((root / copy).read_bytes(), **limits),
                                          check_image((root / original).read_bytes(), **limits)])
            return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

        print(f"unirag from {Path(unirag.__file__).parent}; {len(photos)} photos, {len(products)} products")
        print("| copy | index build (min / mean) | Retriever.search (min / mean) | upload (min / mean) |")
        print("|---|---|---|---|")
        for kind, items in pairs.items():
            cols = []
            for measure in (lambda o, c: score(root / o, c), lambda o, c: score(root / c, o), upload):
                values = [measure(o, c) for o, c in items]
                cols.append(f"{min(values):.4f} / {np.mean(values):.4f}")
            print(f"| {kind} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
