"""CIR loaders on the full real FashionIQ, CIRR and CIRCO annotation files: the official counts.

The default suite runs the same checks on committed slices (tests/cir/test_datasets.py).
"""

import json

from unirag.cir.datasets import join_fashioniq_captions, load_dataset


def test_fashioniq_dress_val(cir_data):
    ds = load_dataset("fashioniq", cir_data / "fashioniq/captions/cap.dress.val.json")
    assert ds.name == "fashioniq-dress-val"
    assert len(ds.queries) == 2017 and len(ds.pool) == 3817
    q = ds.queries[0]
    assert (q.reference, q.targets) == ("B005X4PL1G", ["B0084Y8XIU"])
    assert q.text == "is shiny and silver with shorter sleeves and fit and flare"
    assert ds.pool["B0084Y8XIU"] == "B0084Y8XIU.png"
    assert all(t in ds.pool for q in ds.queries for t in q.targets)
    assert not ds.exclude_reference


def test_fashioniq_test_split_has_no_targets_and_strips_caption_punctuation(cir_data):
    ds = load_dataset("fashioniq", cir_data / "fashioniq/captions/cap.toptee.test.json")
    assert len(ds.queries) == 2056 and not any(q.targets for q in ds.queries)
    assert ds.queries[0].text == "the tank top is blue with a character of a woman and has no sleeves"
    assert join_fashioniq_captions([" yello and more flowing", "short and black"]) == \
        "yello and more flowing and short and black"


def test_cirr_val_and_test1(cir_data):
    ds = load_dataset("cirr", cir_data / "cirr/captions/cap.rc2.val.json")
    assert len(ds.queries) == 4181 and len(ds.pool) == 2297 and ds.exclude_reference
    q = ds.queries[0]
    assert (q.qid, q.reference, q.targets, q.text) == (
        "12060", "dev-244-0-img0", ["dev-1028-1-img1"], "show three bottles of soft drink")
    assert q.subset == ["dev-430-3-img0", "dev-63-0-img1", "dev-1028-1-img1", "dev-1028-2-img1",
                        "dev-244-0-img0", "dev-1028-2-img0"]
    assert ds.pool["dev-244-0-img0"] == "dev/dev-244-0-img0.png"
    assert all(x.reference in ds.pool and x.targets[0] in ds.pool for x in ds.queries)
    test = load_dataset("cirr", cir_data / "cirr/captions/cap.rc2.test1.json", limit=10)
    assert len(test.queries) == 10 and not any(q.targets for q in test.queries) and len(test.pool) == 2315


def test_circo_val_several_ground_truths(cir_data, tmp_path):
    ds = load_dataset("circo", cir_data / "circo/annotations/val.json")
    assert len(ds.queries) == 220
    q = ds.queries[0]
    assert (q.reference, q.targets[:3]) == ("271520", ["355099", "528417", "534704"])
    assert sum(len(x.targets) for x in ds.queries) / 220 > 2  # several ground truths per query
    assert ds.pool["355099"] == "unlabeled2017/000000355099.jpg"
    assert ds.notes and "only the images the annotations mention" in ds.notes[0]
    test = load_dataset("circo", cir_data / "circo/annotations/test.json")
    assert len(test.queries) == 800 and not any(q.targets for q in test.queries)
    info = tmp_path / "image_info.json"
    info.write_text(json.dumps({"images": [{"id": 1, "file_name": "000000000001.jpg"}, {"id": 7}]}))
    with_list = load_dataset("circo", cir_data / "circo/annotations/val.json", split_file=info)
    assert list(with_list.pool) == ["1", "7"] and not with_list.notes


def test_missing_images_are_reported_not_raised(cir_data, tmp_path):
    ds = load_dataset("cirr", cir_data / "cirr/captions/cap.rc2.val.json", images_root=tmp_path, limit=3)
    pool_missing, ref_missing = ds.missing_images()
    assert len(pool_missing) == 2297 and len(ref_missing) == 3


def test_mbeir_task7_from_real_myntra_products(myntra, tmp_path):
    from myntra_cir import build_colour_cir

    q, pool = build_colour_cir(myntra / "products.jsonl", tmp_path, n_queries=20, seed=0)
    rows = [json.loads(x) for x in q.read_text().splitlines()]
    assert all(r["task_id"] == 7 and r["query_modality"] == "image,text" for r in rows)
    ds = load_dataset("mbeir", q, myntra, pool)
    assert len(ds.queries) == 20 and len(ds.pool) == 3000 and not ds.exclude_reference
    products = {str(p["id"]): p for p in map(json.loads, (myntra / "products.jsonl").read_text().splitlines())}
    for x in ds.queries:
        ref = products[x.reference.removeprefix("myntra:")]  # the reference image is a pool member
        colour = x.text.removeprefix("change the colour to ")
        assert colour != ref["baseColour"].lower() and x.targets
        for t in x.targets:
            p = products[t.removeprefix("myntra:")]
            assert (p["articleType"], p["baseColour"].lower()) == (ref["articleType"], colour)
    assert ds.missing_images() == ([], [])
    assert load_dataset("mbeir", q, myntra, pool, exclude_reference=True).exclude_reference


def test_official_query_texts_and_cirr_validation_cut(cir_data):
    """xr_query_text=official / xr_cirr_val_limit=2400 on the full files: 01yzzyu/xr.github.io@cf44a37
    XR/utils/data.py:130 always joins FashionIQ's two captions (an empty first one leaves ' and ...'),
    :82-88 names CIRR test1's blank caption 'the same image', :99 keeps CIRR val's first 2400 queries."""
    def texts(kind, rel, **kw):
        return {q.qid: q.text for q in load_dataset(kind, cir_data / rel, **kw).queries}

    paper = texts("fashioniq", "fashioniq/captions/cap.toptee.val.json")
    official = texts("fashioniq", "fashioniq/captions/cap.toptee.val.json", query_text="official")
    assert {k for k in paper if paper[k] != official[k]} == {"toptee-676", "toptee-1076"}
    assert (paper["toptee-676"], official["toptee-676"]) == ("is an off the shoulder top",
                                                             " and is an off the shoulder top")
    paper = texts("cirr", "cirr/captions/cap.rc2.test1.json")
    official = texts("cirr", "cirr/captions/cap.rc2.test1.json", query_text="official", cirr_val_limit=2400)
    assert len(official) == 4148 and {k for k in paper if paper[k] != official[k]} == {"27098"}
    assert (paper["27098"], official["27098"]) == (" ", "the same image")
    val = load_dataset("cirr", cir_data / "cirr/captions/cap.rc2.val.json", query_text="official", cirr_val_limit=2400)
    assert len(val.queries) == 2400 and val.queries[0].qid == "12060"
