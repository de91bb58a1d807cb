"""Rebuild the demo sample bundled in src/unirag/demo/data/ from ../shared/data/coco-val2017-mini.

The sample is a real subset of COCO val2017: photos copied byte for byte (nothing resized), their
official caption annotations (real annotation ids) and image entries in the official COCO captions
JSON format, and an ATTRIBUTION.md naming each photo's Flickr licence and URL.

Selection (deterministic): photos whose Flickr licence allows commercial use (BY, BY-SA, BY-ND; see
--allow-noncommercial), smallest files first until the byte budget or the photo cap is reached, then
written in the order of the source file.

    .venv/bin/python scripts/make_demo_sample.py [--shared ../shared/data] [--out src/unirag/demo/data]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def select(mini: list[dict], root: Path, max_bytes: int, max_photos: int, allow_nc: bool) -> list[dict]:
    usable = [m for m in mini if allow_nc or "NonCommercial" not in m["license"]]
    by_size = sorted(usable, key=lambda m: ((root / m["image"]).stat().st_size, m["image_id"]))
    chosen, total = set(), 0
    for m in by_size:
        size = (root / m["image"]).stat().st_size
        if len(chosen) >= max_photos or total + size > max_bytes:
            break
        chosen.add(m["image_id"])
        total += size
    return [m for m in mini if m["image_id"] in chosen]


def attribution(images: list[dict], licenses: dict[int, dict]) -> str:
    lines = [
        "# Demo sample: attribution and licences",
        "",
        f"{len(images)} photographs from the MS-COCO 2017 validation set with their human captions,",
        "copied unmodified (not resized) from COCO val2017. Rebuild with `scripts/make_demo_sample.py`.",
        "",
        "- **Captions** (`captions.json`, official COCO captions format, real annotation ids):",
        "  COCO Consortium,",
        "  licensed under Creative Commons Attribution 4.0 (https://creativecommons.org/licenses/by/4.0/).",
        "  Lin et al., *Microsoft COCO: Common Objects in Context*, ECCV 2014; https://cocodataset.org.",
        "- **Photos** (`images/`): each photo belongs to its Flickr author and is used under the licence",
        "  listed below (also in `captions.json`, field `license` of each image). COCO does not own them.",
        "",
        "| file | licence | Flickr URL |",
        "|---|---|---|",
    ]
    for img in images:
        lic = licenses[img["license"]]
        lines.append(f"| {img['file_name']} | [{lic['name']}]({lic['url']}) | {img['flickr_url']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=REPO / "src" / "unirag" / "demo" / "data")
    ap.add_argument("--max-bytes", type=int, default=7_800_000, help="byte budget for the photos")
    ap.add_argument("--max-photos", type=int, default=60)
    ap.add_argument("--allow-noncommercial", action="store_true", help="also pick NC-licensed photos")
    args = ap.parse_args()

    root = args.shared / "coco-val2017-mini"
    mini = [
        json.loads(line)
        for line in (root / "captions.jsonl").read_text(encoding="utf-8").splitlines()
        if line
    ]
    official = json.loads((root / "captions_val2017_all5000.json").read_text(encoding="utf-8"))
    chosen = select(mini, root, args.max_bytes, args.max_photos, args.allow_noncommercial)
    ids = [m["image_id"] for m in chosen]

    image_by_id = {img["id"]: img for img in official["images"]}
    images = [image_by_id[i] for i in ids]
    annotations = [a for a in official["annotations"] if a["image_id"] in set(ids)]
    for m in chosen:  # the mini file's captions are the official ones, whitespace-stripped
        official_caps = [a["caption"].strip() for a in annotations if a["image_id"] == m["image_id"]]
        if official_caps != m["captions"]:
            raise SystemExit(f"captions of image {m['image_id']} differ between the two source files")
    licenses = {lic["id"]: lic for lic in official["licenses"]}
    used = sorted({img["license"] for img in images})

    out = args.out
    (out / "images").mkdir(parents=True, exist_ok=True)
    keep = {img["file_name"] for img in images}
    for old in (out / "images").glob("*"):
        if old.name not in keep:
            old.unlink()
    for m, img in zip(chosen, images, strict=True):
        shutil.copyfile(root / m["image"], out / "images" / img["file_name"])
    data = {
        "info": official["info"],
        "licenses": [licenses[i] for i in used],
        "images": images,
        "annotations": annotations,
        "type": official.get("type", "captions"),
    }
    (out / "captions.json").write_text(
        json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "ATTRIBUTION.md").write_text(attribution(images, licenses), encoding="utf-8")
    size = sum((out / "images" / k).stat().st_size for k in keep)
    print(f"{len(images)} photos ({size / 1e6:.2f} MB), {len(annotations)} captions -> {out}")


if __name__ == "__main__":
    main()
