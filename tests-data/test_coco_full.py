"""COCO on the full coco-val2017-mini folder: import counts, the official 5,000-image caption file, and
the bundled demo sample checked byte for byte against its source. The default suite runs the same
importer checks on tests/fixtures/coco-mini."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import unirag
from unirag.data.importers import import_coco
from unirag.data.mbeir import read_candidates
from unirag.data.records import Modality

DEMO = Path(unirag.__file__).parent / "demo" / "data"


@pytest.fixture(scope="module")
def mini_rows(coco_mini: Path) -> list[dict]:
    return [
        json.loads(x) for x in (coco_mini / "captions.jsonl").read_text(encoding="utf-8").splitlines() if x
    ]


@pytest.fixture(scope="module")
def imported(coco_mini: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("coco_jsonl")
    summary = import_coco(coco_mini / "captions.jsonl", coco_mini, out, show_progress=False)
    return summary, out


@pytest.fixture(scope="module")
def demo() -> dict:
    return json.loads((DEMO / "captions.json").read_text(encoding="utf-8"))


def test_counts_match_the_source_file(imported, mini_rows: list[dict]) -> None:
    summary, out = imported
    n_caps = sum(len(r["captions"]) for r in mini_rows)
    assert (len(mini_rows), n_caps) == (159, 795)
    pool = list(read_candidates(out / "pool.jsonl"))
    assert Counter(c.modality for c in pool) == {Modality.IMAGE: 159, Modality.TEXT: 795}
    assert (summary.n_image_candidates, summary.n_text_candidates) == (159, 795)
    assert summary.n_queries_image2text == 159 and summary.n_queries_text2image == 159
    assert len(summary.skipped_images) == 0
    written = json.loads((out / "import_summary.json").read_text())
    assert written["pool"] == {"image": 159, "text": 795, "total": 954}
    assert written["skipped_images"]["count"] == 0


def test_official_json_with_partial_image_folder(
    coco_mini: Path, mini_rows: list[dict], tmp_path: Path
) -> None:
    """The official 5,000-image caption file against the 159 photos present: the rest is reported, skipped."""
    official = json.loads((coco_mini / "captions_val2017_all5000.json").read_text())
    s = import_coco(
        coco_mini / "captions_val2017_all5000.json",
        coco_mini / "images",
        tmp_path,
        check="exists",
        show_progress=False,
    )
    assert s.n_image_candidates == 159 and s.n_text_candidates == 795
    assert len(s.skipped_images) == len(official["images"]) - 159 == 4841
    assert s.skipped_captions == len(official["annotations"]) - 795
    assert "4841 image(s) missing or unreadable" in s.format() and "... and 4836 more" in s.format()
    pool = {c.did: c for c in read_candidates(tmp_path / "pool.jsonl")}
    ann = next(a for a in official["annotations"] if a["image_id"] == mini_rows[0]["image_id"])
    assert pool[f"coco:txt:{ann['id']}"].txt == ann["caption"].strip()  # annotation ids become dids
    img = pool[f"coco:img:{mini_rows[0]['image_id']}"]
    assert img.img_path == Path(mini_rows[0]["image"]).name
    assert json.loads(img.src_content)["license"] == mini_rows[0]["license"]
    assert json.loads((tmp_path / "import_summary.json").read_text())["skipped_images"]["count"] == 4841


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
