"""The bundled demo sample is a faithful, attributed subset of real COCO val2017 data, and imports cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import unirag
from unirag.data.importers import import_coco

DEMO = Path(unirag.__file__).parent / "demo" / "data"


@pytest.fixture(scope="module")
def demo() -> dict:
    return json.loads((DEMO / "captions.json").read_text(encoding="utf-8"))


def test_sample_agrees_with_the_coco_mini_rows(demo: dict, coco_mini: Path) -> None:
    """Each demo photo's official-format metadata and captions equal its row in coco-val2017-mini's
    captions.jsonl (copied unmodified into tests/fixtures/coco-mini). The byte-for-byte check against
    the official 5,000-image file and photos is tests-data/test_coco_full.py."""
    rows = {r["image_id"]: r for r in map(json.loads, (coco_mini / "captions.jsonl").read_text().splitlines())}
    licences = {lic["id"]: lic for lic in demo["licenses"]}
    assert 40 <= len(demo["images"]) <= 60 and set(rows) == {img["id"] for img in demo["images"]}
    for img in demo["images"]:
        row = rows[img["id"]]
        assert row["image"] == f"images/{img['file_name']}"
        assert (row["width"], row["height"], row["flickr_url"]) == (img["width"], img["height"], img["flickr_url"])
        assert row["license_url"] == licences[img["license"]]["url"]
        caps = [a["caption"] for a in demo["annotations"] if a["image_id"] == img["id"]]
        assert sorted(c.strip() for c in caps) == sorted(c.strip() for c in row["captions"])
    assert sorted(p.name for p in (DEMO / "images").iterdir()) == sorted(
        i["file_name"] for i in demo["images"]
    )
    assert sum(p.stat().st_size for p in (DEMO / "images").iterdir()) < 8_000_000


def test_every_photo_is_attributed(demo: dict) -> None:
    licenses = {lic["id"]: lic for lic in demo["licenses"]}
    attribution = (DEMO / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in attribution or "Attribution 4.0" in attribution
    for img in demo["images"]:
        lic = licenses[img["license"]]
        assert "NonCommercial" not in lic["name"]
        assert f"| {img['file_name']} | [{lic['name']}]({lic['url']}) | {img['flickr_url']} |" in attribution


def test_sample_imports(demo: dict, tmp_path: Path) -> None:
    s = import_coco(DEMO / "captions.json", DEMO / "images", tmp_path, show_progress=False)
    assert s.n_image_candidates == len(demo["images"]) and s.n_text_candidates == len(demo["annotations"])
    assert len(s.skipped_images) == 0 and s.n_queries_image2text == len(demo["images"])
