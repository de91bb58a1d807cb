"""Cut the small real-data slices the default test suite uses (tests/fixtures/) out of the shared data.

The default suite must pass on a clone with no ``../shared`` beside it, so it reads only committed
files. This script is how those files were made (run from the repository root):

    .venv/bin/python scripts/make_test_fixtures.py ../shared/data

Every row is copied unmodified from the source file; the slices only drop rows (and, for the
image-split lists, the images no kept query mentions). Deterministic: no randomness.

- ``coco-mini/captions.jsonl``: the rows of ``coco-val2017-mini/captions.jsonl`` whose photo is in
  the bundled demo sample (``src/unirag/demo/data``, 51 photos); ``coco-mini/images`` is a symlink
  to the demo photos, so no image is stored twice.
- ``myntra/``: about 110 products (rows of ``products.jsonl`` and their 224x224 photos): for each
  of a few article types, the first products (by id) of its three most common colours, so the
  colour-change CIR builders find several colours per article type.
- ``cir/``: the first queries of the CIRR, FashionIQ and CIRCO annotation files with the image-split
  entries those queries mention (plus the first split entries as distractors), licences alongside.
- ``mbeir/``: the M-BEIR example lines and schema, copied whole (a few KB).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures"
DEMO_IMAGES = REPO / "src" / "unirag" / "demo" / "data" / "images"

MYNTRA_KEYS = [("Shirts", "Men"), ("Tshirts", "Men"), ("Dresses", "Women"), ("Tops", "Women"),
               ("Casual Shoes", "Men"), ("Kurtas", "Women"), ("Handbags", "Women"), ("Heels", "Women")]
MYNTRA_PER_COLOUR = 5
N_QUERIES = {"val": 40, "test": 20}   # per annotation file
N_DISTRACTORS = 40                     # extra image-split entries per split file


def _dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def coco(shared: Path) -> None:
    out = OUT / "coco-mini"
    out.mkdir(parents=True, exist_ok=True)
    keep = {p.name for p in DEMO_IMAGES.glob("*.jpg")}
    lines = (shared / "coco-val2017-mini" / "captions.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [line for line in lines if line.strip() and Path(json.loads(line)["image"]).name in keep]
    assert len(rows) == len(keep), "every demo photo must be in coco-val2017-mini"
    (out / "captions.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    link = out / "images"
    if not link.is_symlink():
        link.symlink_to(Path("..", "..", "..", "src", "unirag", "demo", "data", "images"))


def myntra(shared: Path) -> None:
    src = shared / "myntra-fashion-3k"
    out = OUT / "myntra"
    lines = [line for line in (src / "products.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [(json.loads(line), line) for line in lines]
    chosen: set[int] = set()
    for art, gender in MYNTRA_KEYS:
        items = sorted((r for r, _ in rows if (r.get("articleType"), r.get("gender")) == (art, gender)
                        and r.get("baseColour")), key=lambda r: r["id"])
        for colour, _ in Counter(r["baseColour"] for r in items).most_common(3):
            chosen.update([r["id"] for r in items if r["baseColour"] == colour][:MYNTRA_PER_COLOUR])
    kept = [(r, line) for r, line in rows if r["id"] in chosen]
    (out / "images").mkdir(parents=True, exist_ok=True)
    for r, _ in kept:
        shutil.copyfile(src / r["image"], out / r["image"])
    (out / "products.jsonl").write_text("\n".join(line for _, line in kept) + "\n", encoding="utf-8")


def cirr(shared: Path) -> None:
    src, out = shared / "cir" / "cirr", OUT / "cir" / "cirr"
    for split in ("val", "test1"):
        n = N_QUERIES["val" if split == "val" else "test"]
        anns = json.loads((src / "captions" / f"cap.rc2.{split}.json").read_text())[:n]
        pairs = {a["pairid"] for a in anns}
        ext = [a for a in json.loads((src / "captions_ext" / f"cap.ext.rc2.{split}.json").read_text())
               if a["pairid"] in pairs]
        names = json.loads((src / "image_splits" / f"split.rc2.{split}.json").read_text())
        wanted = {a["reference"] for a in anns} | {a["target_hard"] for a in anns if "target_hard" in a}
        wanted |= {m for a in anns for m in a["img_set"]["members"]}
        wanted |= set(list(names)[:N_DISTRACTORS])
        _dump(out / "captions" / f"cap.rc2.{split}.json", anns)
        _dump(out / "captions_ext" / f"cap.ext.rc2.{split}.json", ext)
        _dump(out / "image_splits" / f"split.rc2.{split}.json", {k: v for k, v in names.items() if k in wanted})
    shutil.copyfile(src / "LICENSE", out / "LICENSE")


def fashioniq(shared: Path) -> None:
    src, out = shared / "cir" / "fashioniq", OUT / "cir" / "fashioniq"
    for cat in ("dress", "shirt", "toptee"):
        for split in ("val", "test"):
            anns = json.loads((src / "captions" / f"cap.{cat}.{split}.json").read_text())[:N_QUERIES[split]]
            names = json.loads((src / "image_splits" / f"split.{cat}.{split}.json").read_text())
            wanted = {a["candidate"] for a in anns} | {a["target"] for a in anns if "target" in a}
            wanted |= set(names[:N_DISTRACTORS])
            _dump(out / "captions" / f"cap.{cat}.{split}.json", anns)
            _dump(out / "image_splits" / f"split.{cat}.{split}.json", [x for x in names if x in wanted])


def circo(shared: Path) -> None:
    src, out = shared / "cir" / "circo", OUT / "cir" / "circo"
    for split in ("val", "test"):
        anns = json.loads((src / "annotations" / f"{split}.json").read_text())[:N_QUERIES[split]]
        _dump(out / "annotations" / f"{split}.json", anns)
    shutil.copyfile(src / "LICENSE", out / "LICENSE")


def mbeir(shared: Path) -> None:
    src, out = shared / "mbeir", OUT / "mbeir"
    (out / "real_examples").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "SCHEMA.txt", out / "SCHEMA.txt")
    for p in (src / "real_examples").iterdir():
        shutil.copyfile(p, out / "real_examples" / p.name)


def main() -> None:
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO.parent / "shared" / "data"
    for step in (coco, myntra, cirr, fashioniq, circo, mbeir):
        step(shared)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
