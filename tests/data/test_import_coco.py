"""COCO import on the committed real COCO slice (tests/fixtures/coco-mini) (both caption formats), incl. bad images and bad files."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

import unirag
from unirag.data.importers import import_coco
from unirag.data.mbeir import read_candidates, read_qrels, read_queries
from unirag.data.records import Modality
from unirag.errors import InputError


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


def test_counts_match_the_source_file(imported, mini_rows: list[dict]) -> None:
    summary, out = imported
    n_caps = sum(len(r["captions"]) for r in mini_rows)
    assert (len(mini_rows), n_caps) == (51, 255)  # the committed coco-mini fixture
    pool = list(read_candidates(out / "pool.jsonl"))
    assert Counter(c.modality for c in pool) == {Modality.IMAGE: 51, Modality.TEXT: 255}
    assert (summary.n_image_candidates, summary.n_text_candidates) == (51, 255)
    assert summary.n_queries_image2text == 51 and summary.n_queries_text2image == 51
    assert len(summary.skipped_images) == 0
    written = json.loads((out / "import_summary.json").read_text())
    assert written["pool"] == {"image": 51, "text": 255, "total": 306}
    assert written["skipped_images"]["count"] == 0


def test_pairing_and_positives_follow_the_source(imported, mini_rows: list[dict]) -> None:
    _, out = imported
    pool = {c.did: c for c in read_candidates(out / "pool.jsonl")}
    by_source: dict[str, list] = {}
    for c in pool.values():
        by_source.setdefault(c.source_id, []).append(c)
    for row in mini_rows:
        group = by_source[str(row["image_id"])]
        images = [c for c in group if c.modality is Modality.IMAGE]
        assert [c.img_path for c in images] == [row["image"]]
        assert [c.txt for c in group if c.modality is Modality.TEXT] == row["captions"]
        assert json.loads(images[0].src_content)["license"] == row["license"]

    i2t = read_queries(out / "queries_task3_image2text.jsonl")
    qrels3 = read_qrels(out / "qrels_task3.txt")
    for q in i2t:
        assert q.task_id == 3 and q.modality is Modality.IMAGE
        pos = [pool[d] for d in q.pos_cand_list]
        assert len(pos) == 5 and all(p.modality is Modality.TEXT for p in pos)
        img = pool[f"coco:img:{pos[0].source_id}"]
        assert {p.source_id for p in pos} == {img.source_id} and img.img_path == q.img_path
        assert qrels3.get(q.qid) == set(q.pos_cand_list) and qrels3.task_ids[q.qid] == 3

    t2i = read_queries(out / "queries_task0_text2image.jsonl")
    qrels0 = read_qrels(out / "qrels_task0.txt")
    assert len({pool[q.pos_cand_list[0]].source_id for q in t2i}) == 51  # one query per image
    for q in t2i:
        (img_did,) = q.pos_cand_list
        own = [c.txt for c in by_source[pool[img_did].source_id] if c.modality is Modality.TEXT]
        assert q.task_id == 0 and q.txt in own and qrels0.get(q.qid) == {img_did}


def test_text_queries_are_seeded(coco_mini: Path, tmp_path: Path, imported) -> None:
    _, out0 = imported
    first = [q.qid for q in read_queries(out0 / "queries_task0_text2image.jsonl")]
    import_coco(
        coco_mini / "captions.jsonl", coco_mini, tmp_path / "again", check="exists", show_progress=False
    )
    assert [q.qid for q in read_queries(tmp_path / "again" / "queries_task0_text2image.jsonl")] == first
    import_coco(
        coco_mini / "captions.jsonl", coco_mini, tmp_path / "s1", seed=1, check="exists", show_progress=False
    )
    other = [q.qid for q in read_queries(tmp_path / "s1" / "queries_task0_text2image.jsonl")]
    assert len(other) == 51 and sum(a != b for a, b in zip(first, other, strict=True)) > 25
    # a per-image seed: keeping only the first 10 images keeps their sampled captions
    import_coco(
        coco_mini / "captions.jsonl",
        coco_mini,
        tmp_path / "l10",
        limit=10,
        check="exists",
        show_progress=False,
    )
    assert [q.qid for q in read_queries(tmp_path / "l10" / "queries_task0_text2image.jsonl")] == first[:10]
    s = import_coco(
        coco_mini / "captions.jsonl",
        coco_mini,
        tmp_path / "all",
        all_captions=True,
        check="none",
        show_progress=False,
    )
    assert s.n_queries_text2image == 255
    assert len(read_qrels(tmp_path / "all" / "qrels_task0.txt")) == 255


def test_official_json_with_partial_image_folder(tmp_path: Path) -> None:
    """An official-format caption file (the demo sample's) against a folder holding 20 of its 51 photos:
    the rest is reported and skipped, annotation ids become dids."""
    demo = Path(unirag.__file__).parent / "demo" / "data"
    official = json.loads((demo / "captions.json").read_text(encoding="utf-8"))
    present = sorted(official["images"], key=lambda im: im["id"])[:20]
    (tmp_path / "images").mkdir()
    for im in present:
        shutil.copyfile(demo / "images" / im["file_name"], tmp_path / "images" / im["file_name"])
    ids = {im["id"] for im in present}
    n_caps = sum(1 for a in official["annotations"] if a["image_id"] in ids)
    s = import_coco(demo / "captions.json", tmp_path / "images", tmp_path / "out", check="exists",
                    show_progress=False)
    assert s.n_image_candidates == 20 and s.n_text_candidates == n_caps >= 100
    assert len(s.skipped_images) == len(official["images"]) - 20 == 31
    assert s.skipped_captions == len(official["annotations"]) - n_caps
    assert "31 image(s) missing or unreadable" in s.format() and "... and 26 more" in s.format()
    pool = {c.did: c for c in read_candidates(tmp_path / "out" / "pool.jsonl")}
    ann = next(a for a in official["annotations"] if a["image_id"] == present[0]["id"])
    assert pool[f"coco:txt:{ann['id']}"].txt == ann["caption"].strip()  # annotation ids become dids
    img = pool[f"coco:img:{present[0]['id']}"]
    assert img.img_path == present[0]["file_name"]
    licences = {lic["id"]: lic["name"] for lic in official["licenses"]}
    assert json.loads(img.src_content)["license"] == licences[present[0]["license"]]
    assert json.loads((tmp_path / "out" / "import_summary.json").read_text())["skipped_images"]["count"] == 31


def test_missing_and_corrupt_images_are_reported_and_skipped(
    coco_mini: Path, mini_rows: list[dict], tmp_path: Path
) -> None:
    rows = mini_rows[:12]
    (tmp_path / "images").mkdir()
    for r in rows:
        shutil.copyfile(coco_mini / r["image"], tmp_path / r["image"])
    (tmp_path / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    missing, truncated = tmp_path / rows[3]["image"], tmp_path / rows[7]["image"]
    missing.unlink()
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])  # header intact: PIL's verify() alone would accept it

    s = import_coco(tmp_path / "captions.jsonl", tmp_path, tmp_path / "out", show_progress=False)
    assert (s.n_image_candidates, s.n_text_candidates, s.skipped_captions) == (10, 50, 10)
    reasons = dict(s.skipped_images.bad)
    assert reasons[str(missing)] == "not found" and reasons[str(truncated)].startswith("corrupt")
    text = s.format()
    assert "2 image(s) missing or unreadable" in text and str(missing) in text and str(truncated) in text
    sources = {c.source_id for c in read_candidates(tmp_path / "out" / "pool.jsonl")}
    assert str(rows[3]["image_id"]) not in sources and str(rows[7]["image_id"]) not in sources
    for qfile in ("queries_task3_image2text.jsonl", "queries_task0_text2image.jsonl"):
        assert len(read_queries(tmp_path / "out" / qfile)) == 10
    written = json.loads((tmp_path / "out" / "import_summary.json").read_text())
    assert written["skipped_images"]["count"] == 2 and written["skipped_captions"] == 10


def _coco_file(tmp_path: Path, data) -> Path:
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


GOOD_IMG = {"id": 1, "file_name": "a.jpg"}
GOOD_ANN = {"id": 10, "image_id": 1, "caption": "a cat"}


@pytest.mark.parametrize(
    "data, field, words",
    [
        ('{"images": [', None, "malformed JSON"),
        ({"annotations": []}, "images", "missing field"),
        ({"images": [GOOD_IMG], "annotations": {}}, "annotations", "expected a list"),
        ({"images": [{"file_name": "a.jpg"}], "annotations": []}, "images[0].id", "missing field"),
        ({"images": [{"id": 1}], "annotations": []}, "images[0].file_name", "file name"),
        ({"images": [GOOD_IMG, GOOD_IMG], "annotations": []}, "images[1].id", "duplicate image id"),
        (
            {"images": [GOOD_IMG], "annotations": [GOOD_ANN, {"id": 11, "image_id": 1}]},
            "annotations[1].caption",
            "missing or empty caption",
        ),
        (
            {"images": [GOOD_IMG], "annotations": [GOOD_ANN, {"id": 11, "image_id": 1, "caption": " "}]},
            "annotations[1].caption",
            "empty caption",
        ),
        (
            {"images": [GOOD_IMG], "annotations": [GOOD_ANN, GOOD_ANN]},
            "annotations[1].id",
            "duplicate annotation",
        ),
        (
            {"images": [GOOD_IMG], "annotations": [{"id": 11, "image_id": [1], "caption": "x"}]},
            "annotations[0].image_id",
            "expected an integer or string id",
        ),
        (
            {"images": [GOOD_IMG], "annotations": [{"id": True, "image_id": 1, "caption": "x"}]},
            "annotations[0].id",
            "expected an integer or string id, got True",
        ),
    ],
)
def test_bad_coco_json_names_the_field(tmp_path: Path, data, field, words: str) -> None:
    path = _coco_file(tmp_path, data)
    with pytest.raises(InputError) as err:
        import_coco(path, tmp_path, tmp_path / "out", show_progress=False)
    assert err.value.field == field and words in str(err.value) and str(path) in str(err.value)
    assert not (tmp_path / "out").exists()


def test_orphan_captions_counted_and_no_readable_image_is_an_error(
    coco_mini: Path, mini_rows: list[dict], tmp_path: Path
) -> None:
    name = Path(mini_rows[0]["image"]).name
    data = {
        "images": [{"id": 5, "file_name": name}],
        "annotations": [{"id": 1, "image_id": 5, "caption": "x"}, {"id": 2, "image_id": 99, "caption": "y"}],
    }
    s = import_coco(_coco_file(tmp_path, data), coco_mini / "images", tmp_path / "out", show_progress=False)
    assert s.captions_without_image == 1 and s.n_text_candidates == 1
    assert "1 caption(s) name an image id not in the input" in s.format()
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=f"none of the 1 images is readable .*{tmp_path / 'empty' / name}"):
        import_coco(
            _coco_file(tmp_path, data),
            tmp_path / "empty",
            tmp_path / "out2",
            check="exists",
            show_progress=False,
        )
    with pytest.raises(InputError, match="images root is not a directory"):
        import_coco(_coco_file(tmp_path, data), tmp_path / "nowhere", tmp_path / "out3", show_progress=False)


def test_wrong_images_root_gets_a_hint(coco_mini: Path, tmp_path: Path) -> None:
    """captions.jsonl paths start with 'images/'; giving the images folder itself is a common slip."""
    with pytest.raises(InputError) as err:
        import_coco(coco_mini / "captions.jsonl", coco_mini / "images", tmp_path, check="exists", limit=5)
    assert "none of the 5 images is readable" in str(err.value)
    assert f"pass its parent, {coco_mini}." in str(err.value)
    assert "5 image(s) missing or unreadable" in str(err.value)
