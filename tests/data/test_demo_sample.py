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


def test_sample_is_a_real_unmodified_subset(demo: dict, coco_mini: Path) -> None:
    official = json.loads((coco_mini / "captions_val2017_all5000.json").read_text(encoding="utf-8"))
    off_images = {img["id"]: img for img in official["images"]}
    off_anns = {a["id"]: a for a in official["annotations"]}
    assert 40 <= len(demo["images"]) <= 60
    for img in demo["images"]:
        assert img == off_images[img["id"]]
        assert (DEMO / "images" / img["file_name"]).read_bytes() == (
            coco_mini / "images" / img["file_name"]
        ).read_bytes()
    assert all(a == off_anns[a["id"]] for a in demo["annotations"])
    ids = {img["id"] for img in demo["images"]}
    assert len(demo["annotations"]) == sum(1 for a in official["annotations"] if a["image_id"] in ids)
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
