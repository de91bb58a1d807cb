"""CIR loaders on slices of the real FashionIQ, CIRR and CIRCO annotation files (tests/fixtures/cir).

The same checks on the full files, with their official counts, are in tests-data/test_cir_datasets_full.py.
"""

import json

import pytest

from unirag.cir.datasets import join_fashioniq_captions, load_dataset
from unirag.errors import InputError


def test_fashioniq_dress_val(cir_data):
    ds = load_dataset("fashioniq", cir_data / "fashioniq/captions/cap.dress.val.json")
    assert ds.name == "fashioniq-dress-val"
    split = json.loads((cir_data / "fashioniq/image_splits/split.dress.val.json").read_text())
    assert len(ds.queries) == 40 and list(ds.pool) == split
    q = ds.queries[0]
    assert (q.reference, q.targets) == ("B005X4PL1G", ["B0084Y8XIU"])
    assert q.text == "is shiny and silver with shorter sleeves and fit and flare"
    assert ds.pool["B0084Y8XIU"] == "B0084Y8XIU.png"
    assert all(t in ds.pool for q in ds.queries for t in q.targets)
    assert not ds.exclude_reference


def test_fashioniq_test_split_has_no_targets_and_strips_caption_punctuation(cir_data):
    """The two captions joined by ' and ', stripped of whitespace and '.?, ' (CLIP4Cir / CIReVL;
    the official X^R loader's reading, xr_query_text=official, is pinned in test_xr_official_queries.py)."""
    ds = load_dataset("fashioniq", cir_data / "fashioniq/captions/cap.toptee.test.json")
    assert len(ds.queries) == 20 and not any(q.targets for q in ds.queries)
    assert ds.queries[0].text == "the tank top is blue with a character of a woman and has no sleeves"
    assert join_fashioniq_captions([" yello and more flowing", "short and black"]) == \
        "yello and more flowing and short and black"


def test_cirr_val_and_test1(cir_data):
    ds = load_dataset("cirr", cir_data / "cirr/captions/cap.rc2.val.json")
    split = json.loads((cir_data / "cirr/image_splits/split.rc2.val.json").read_text())
    assert len(ds.queries) == 40 and sorted(ds.pool) == sorted(split) and ds.exclude_reference
    q = ds.queries[0]
    assert (q.qid, q.reference, q.targets, q.text) == (
        "12060", "dev-244-0-img0", ["dev-1028-1-img1"], "show three bottles of soft drink")
    assert q.subset == ["dev-430-3-img0", "dev-63-0-img1", "dev-1028-1-img1", "dev-1028-2-img1",
                        "dev-244-0-img0", "dev-1028-2-img0"]
    assert ds.pool["dev-244-0-img0"] == "dev/dev-244-0-img0.png"
    assert all(x.reference in ds.pool and x.targets[0] in ds.pool for x in ds.queries)
    test = load_dataset("cirr", cir_data / "cirr/captions/cap.rc2.test1.json", limit=10)
    split1 = json.loads((cir_data / "cirr/image_splits/split.rc2.test1.json").read_text())
    assert len(test.queries) == 10 and not any(q.targets for q in test.queries) and sorted(test.pool) == sorted(split1)


def test_circo_val_several_ground_truths(cir_data, tmp_path):
    ds = load_dataset("circo", cir_data / "circo/annotations/val.json")
    assert len(ds.queries) == 40
    q = ds.queries[0]
    assert (q.reference, q.targets[:3]) == ("271520", ["355099", "528417", "534704"])
    assert sum(len(x.targets) for x in ds.queries) / len(ds.queries) > 2  # several ground truths per query
    assert ds.pool["355099"] == "unlabeled2017/000000355099.jpg"
    assert ds.notes and "only the images the annotations mention" in ds.notes[0]
    test = load_dataset("circo", cir_data / "circo/annotations/test.json")
    assert len(test.queries) == 20 and not any(q.targets for q in test.queries)
    info = tmp_path / "image_info.json"
    info.write_text(json.dumps({"images": [{"id": 1, "file_name": "000000000001.jpg"}, {"id": 7}]}))
    with_list = load_dataset("circo", cir_data / "circo/annotations/val.json", split_file=info)
    assert list(with_list.pool) == ["1", "7"] and not with_list.notes


def test_bad_annotation_files_name_file_and_field(tmp_path, cir_data):
    bad = tmp_path / "cap.dress.val.json"
    bad.write_text(json.dumps([{"target": "A", "captions": ["x"]}]))
    with pytest.raises(InputError, match="candidate"):
        load_dataset("fashioniq", bad, split_file=cir_data / "fashioniq/image_splits/split.dress.val.json")
    broken = tmp_path / "cap.rc2.val.json"
    broken.write_text("[{")
    with pytest.raises(InputError, match="malformed JSON"):
        load_dataset("cirr", broken, split_file=cir_data / "cirr/image_splits/split.rc2.val.json")
    with pytest.raises(InputError, match="file not found"):
        load_dataset("fashioniq", tmp_path / "cap.dress.val.json", split_file=tmp_path / "nope.json")
    with pytest.raises(InputError, match="unknown CIR dataset"):
        load_dataset("shoes", bad)
    with pytest.raises(InputError, match="--split-file"):
        load_dataset("mbeir", bad)


def test_missing_images_are_reported_not_raised(cir_data, tmp_path):
    ds = load_dataset("cirr", cir_data / "cirr/captions/cap.rc2.val.json", images_root=tmp_path, limit=3)
    pool_missing, ref_missing = ds.missing_images()
    n_pool = len(json.loads((cir_data / "cirr/image_splits/split.rc2.val.json").read_text()))
    assert len(pool_missing) == n_pool > 40 and len(ref_missing) == 3


def test_mbeir_task7_from_real_myntra_products(myntra, tmp_path):
    from myntra_cir import build_colour_cir

    q, pool = build_colour_cir(myntra / "products.jsonl", tmp_path, n_queries=20, seed=0)
    rows = [json.loads(x) for x in q.read_text().splitlines()]
    assert all(r["task_id"] == 7 and r["query_modality"] == "image,text" for r in rows)
    ds = load_dataset("mbeir", q, myntra, pool)
    products = {str(p["id"]): p for p in map(json.loads, (myntra / "products.jsonl").read_text().splitlines())}
    assert len(ds.queries) == 20 and sorted(ds.pool) == sorted(f"myntra:{i}" for i in products)
    assert not ds.exclude_reference
    for x in ds.queries:
        ref = products[x.reference.removeprefix("myntra:")]  # the reference image is a pool member
        colour = x.text.removeprefix("change the colour to ")
        assert colour != ref["baseColour"].lower() and x.targets
        for t in x.targets:
            p = products[t.removeprefix("myntra:")]
            assert (p["articleType"], p["baseColour"].lower()) == (ref["articleType"], colour)
    assert ds.missing_images() == ([], [])
    assert load_dataset("mbeir", q, myntra, pool, exclude_reference=True).exclude_reference
