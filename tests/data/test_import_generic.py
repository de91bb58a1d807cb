"""Generic JSONL/CSV importer: real photos with real captions, merged rows, separators, every bad-row path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from unirag.data.importers import import_generic
from unirag.data.mbeir import read_candidates, read_qrels, read_queries
from unirag.data.records import Modality
from unirag.errors import InputError


@pytest.fixture(scope="module")
def rows(coco_mini: Path) -> list[dict]:
    lines = (coco_mini / "captions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(x) for x in lines[:6]]


def _jsonl(path: Path, objs) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def test_jsonl_list_and_string_captions(rows: list[dict], coco_mini: Path, tmp_path: Path) -> None:
    objs = [{"image": r["image"], "captions": r["captions"], "brand": "x"} for r in rows[:3]]
    objs += [{"image": r["image"], "caption": r["captions"][0]} for r in rows[3:]]
    s = import_generic(
        _jsonl(tmp_path / "My Photos.jsonl", objs), coco_mini, tmp_path / "out", show_progress=False
    )
    assert (s.n_image_candidates, s.n_text_candidates) == (6, 3 * 5 + 3)
    pool = list(read_candidates(tmp_path / "out" / "pool.jsonl"))
    assert pool[0].did == "My_Photos:img:0" and pool[1].did == "My_Photos:txt:0.0"  # name from the file stem
    assert json.loads(pool[0].src_content)["brand"] == "x"  # other fields kept for the image
    texts = {c.source_id: [] for c in pool}
    for c in pool:
        if c.modality is Modality.TEXT:
            texts[c.source_id].append(c.txt)
    assert texts["0"] == rows[0]["captions"] and texts["5"] == [rows[5]["captions"][0]]
    q3 = read_queries(tmp_path / "out" / "queries_task3_image2text.jsonl")
    assert [len(q.pos_cand_list) for q in q3] == [5, 5, 5, 1, 1, 1]


def test_csv_one_caption_per_row_is_merged_by_image(
    rows: list[dict], coco_mini: Path, tmp_path: Path
) -> None:
    path = tmp_path / "pairs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "text", "photo_id"])
        for k in range(5):  # interleaved, as in Flickr30k-style one-caption-per-row files
            for r in rows[:4]:
                w.writerow([r["image"], r["captions"][k], r["image_id"]])
    s = import_generic(
        path,
        coco_mini,
        tmp_path / "out",
        image_field="file",
        caption_field="text",
        id_field="photo_id",
        name="flk",
        all_captions=True,
        show_progress=False,
    )
    assert (s.n_image_candidates, s.n_text_candidates, s.n_queries_text2image) == (4, 20, 20)
    pool = {c.did: c for c in read_candidates(tmp_path / "out" / "pool.jsonl")}
    rid = rows[2]["image_id"]
    assert [pool[f"flk:txt:{rid}.{k}"].txt for k in range(5)] == rows[2]["captions"]
    assert pool[f"flk:img:{rid}"].img_path == rows[2]["image"]
    qrels = read_qrels(tmp_path / "out" / "qrels_task3.txt")
    assert qrels.get(f"flk:q3:{rid}") == {f"flk:txt:{rid}.{k}" for k in range(5)}


def test_csv_caption_separator_tsv_and_limit(rows: list[dict], coco_mini: Path, tmp_path: Path) -> None:
    path = tmp_path / "list.tsv"
    path.write_text(
        "image\tcaption\n" + "".join(f"{r['image']}\t{' | '.join(r['captions'])}\n" for r in rows)
    )
    s = import_generic(path, coco_mini, tmp_path / "out", caption_sep="|", limit=4, show_progress=False)
    assert (s.n_image_candidates, s.n_text_candidates) == (4, 20)
    texts = [c.txt for c in read_candidates(tmp_path / "out" / "pool.jsonl") if c.modality is Modality.TEXT]
    assert texts[:5] == rows[0]["captions"]  # split and stripped


def test_missing_image_is_reported_and_skipped(rows: list[dict], coco_mini: Path, tmp_path: Path) -> None:
    objs = [{"image": r["image"], "captions": r["captions"]} for r in rows[:3]]
    objs.append({"image": "images/does_not_exist.jpg", "captions": ["a ghost"]})
    s = import_generic(_jsonl(tmp_path / "l.jsonl", objs), coco_mini, tmp_path / "out", show_progress=False)
    assert s.n_image_candidates == 3 and s.skipped_captions == 1
    assert str(coco_mini / "images/does_not_exist.jpg") in s.format()


@pytest.mark.parametrize(
    "lines, kwargs, line, field, words",
    [
        (
            ['{"image": "a.jpg", "caption": "x"}', '{"image": "b.jpg", "caption": "y"'],
            {},
            2,
            None,
            "malformed JSON",
        ),
        (['{"caption": "x"}'], {}, 1, "image", "missing field"),
        (['{"image": "", "caption": "x"}'], {}, 1, "image", "non-empty image path"),
        (['{"image": "a.jpg", "text": "x"}'], {}, 1, "caption", "missing field"),
        (
            ['{"image": "a.jpg", "caption": "x"}', '{"image": "b.jpg", "desc": "y"}'],
            {"caption_field": "desc"},
            1,
            "desc",
            "missing field",
        ),
        (['{"image": "a.jpg", "captions": ["x", 3]}'], {}, 1, "captions", "list of strings"),
        (['{"image": "a.jpg", "captions": {"en": "x"}}'], {}, 1, "captions", "list of strings"),
        (['{"image": "a.jpg", "captions": ["x", "  "]}'], {}, 1, "captions", "empty caption"),
        (['{"image": "a.jpg", "caption": "x"}', "42"], {}, 2, None, "JSON object"),
        (
            ['{"image": "a.jpg", "caption": "x", "id": 1}', '{"image": "b.jpg", "caption": "y", "id": 1}'],
            {"id_field": "id"},
            2,
            "id",
            "was given for 'a.jpg'",
        ),
        (['{"image": "a.jpg", "caption": "x"}'], {"id_field": "id"}, 1, "id", "missing or invalid image id"),
        (['{"image": "a.jpg", "caption": "x", "id": true}'], {"id_field": "id"}, 1, "id", "missing or invalid image id"),
    ],
)
def test_bad_jsonl_rows(tmp_path: Path, lines, kwargs, line: int, field, words: str) -> None:
    path = _jsonl(tmp_path / "in.jsonl", lines)
    with pytest.raises(InputError) as err:
        import_generic(path, tmp_path, tmp_path / "out", show_progress=False, **kwargs)
    assert (err.value.line, err.value.field) == (line, field)
    assert f"{path}:{line}" in str(err.value) and words in str(err.value)


@pytest.mark.parametrize(
    "text, kwargs, line, field, words",
    [
        ("image,caption\na.jpg,x\nb.jpg,y,extra\n", {}, 3, None, "3 columns, the header has 2"),
        ("image,caption\na.jpg,x\nb.jpg\n", {}, 3, "caption", "fewer columns"),
        ('image,caption\na.jpg,"multi\nline caption"\nb.jpg,y,z\n', {}, 4, None, "columns"),  # quoted newline
        ("file,caption\na.jpg,x\n", {}, 2, "image", "missing field"),
        ("image,caption\na.jpg,\n", {}, 2, "caption", "empty caption"),
        ("image,caption\na.jpg,x||y\n", {"caption_sep": "|"}, 2, "caption", "empty caption"),
        ("", {}, 1, None, "header row is required"),
    ],
)
def test_bad_csv_rows(tmp_path: Path, text: str, kwargs, line: int, field, words: str) -> None:
    path = tmp_path / "in.csv"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        import_generic(path, tmp_path, tmp_path / "out", show_progress=False, **kwargs)
    assert (err.value.line, err.value.field) == (line, field)
    assert words in str(err.value) and str(path) in str(err.value)


def test_bad_options_and_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        import_generic(tmp_path / "absent.jsonl", tmp_path, tmp_path / "out")
    with pytest.raises(InputError, match="file not found"):  # a folder is not the input file
        import_generic(tmp_path, tmp_path, tmp_path / "out")
    path = _jsonl(tmp_path / "in.jsonl", ['{"image": "a.jpg", "caption": "x"}'])
    with pytest.raises(InputError, match="unknown image check"):
        import_generic(path, tmp_path, tmp_path / "out", check="fast")
    with pytest.raises(InputError, match="dataset name"):
        import_generic(path, tmp_path, tmp_path / "out", name="my set")
    with pytest.raises(InputError, match="unknown input format"):
        import_generic(path, tmp_path, tmp_path / "out", fmt="xml")
    _jsonl(tmp_path / "empty.jsonl", [""])
    with pytest.raises(InputError, match="no images found"):
        import_generic(tmp_path / "empty.jsonl", tmp_path, tmp_path / "out")


def test_an_id_with_whitespace_is_refused_before_any_image_is_read(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl", ['{"image": "a.jpg", "caption": "x", "id": "a b"}'])
    with pytest.raises(InputError, match=r"id 'a b' is empty or contains whitespace") as err:
        import_generic(path, tmp_path, tmp_path / "out", id_field="id", show_progress=False)
    assert f"{path}:1" in str(err.value)
