"""``unirag.Index`` and ``unirag.Pool``: build from files or memory, open, know their pool, search vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import run_cli

import unirag


def test_open_knows_its_pool_encoder_and_images_root(demo):
    index = unirag.Index.open(demo["index"])
    assert index.counts == {"text": 255, "image": 51} and len(index) == 306
    assert index.images_root == demo["images"].absolute()
    assert index.encoder_spec is None  # the offline default
    pool = index.pool
    assert len(pool) == 306 and pool.images_root == index.images_root
    file_pool = unirag.Pool.read(demo["pool"], demo["images"])
    assert {c.did: (c.txt, c.img_path, c.source_id) for c in pool} == \
        {c.did: (c.txt, c.img_path, c.source_id) for c in file_pool}
    image = next(c for c in pool if c.modality.value == "image")
    assert pool.image_file(image).is_file() and pool.image_file(image.did).is_absolute()
    assert index.candidate(image.did).img_path == image.img_path
    with pytest.raises(KeyError, match="no candidate"):
        index.candidate("nope")


def test_search_raw_vectors(demo):
    index = unirag.Index.open(demo["index"])
    encoder = index.load_encoder()
    vectors = encoder.encode_texts(["a man riding a wave on a surfboard", "a plate of food"])
    hits = index.search(vectors, k=7, modality="image")
    assert [len(h) for h in hits] == [7, 7] and all(x.modality == "image" for h in hits for x in h)
    scores, ids = index.topk(vectors, 7, "image")
    assert [x.did for x in hits[0]] == [index.metas[g].did for g in ids[0]]
    np.testing.assert_allclose([x.score for x in hits[1]], scores[1], atol=1e-6)
    single = index.search(vectors[0], k=3)  # one vector = one query, over every modality
    assert len(single) == 1 and [x.score for x in single[0]] == sorted((x.score for x in single[0]), reverse=True)


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_build_from_memory_matches_build_from_file(demo, tmp_path):
    rows = json.loads((demo["images"].parent / "captions.json").read_text())
    file_of = {im["id"]: im["file_name"] for im in rows["images"][:6]}
    caps: dict[int, list[str]] = {}
    for a in rows["annotations"]:
        if a["image_id"] in file_of:
            caps.setdefault(a["image_id"], []).append(a["caption"])
    pool = unirag.Pool.from_pairs([(file_of[i], caps[i]) for i in file_of], images_root=demo["images"])
    assert len(pool) == 6 + sum(len(c) for c in caps.values())
    memory = unirag.Index.build(pool, tmp_path / "mem")
    assert memory.manifest["pool"] is None and memory.images_root == demo["images"].absolute()
    pool.write(tmp_path / "pool.jsonl")
    run_cli("index", "build", "--pool", tmp_path / "pool.jsonl", "--images-root", demo["images"],
            "--out", tmp_path / "file")
    from_file = unirag.Index.open(tmp_path / "file")
    v = memory.load_encoder().encode_texts(["two dogs"])
    a, b = memory.search(v, k=10)[0], from_file.search(v, k=10)[0]
    assert [x.did for x in a] == [x.did for x in b]
    np.testing.assert_allclose([x.score for x in a], [x.score for x in b], atol=1e-6)
    assert unirag.Retriever(memory).search(text="two dogs", k=3).dids == \
        unirag.Retriever(from_file).search(text="two dogs", k=3).dids


def test_pool_records_and_errors(tmp_path):
    pool = unirag.Pool.from_records([
        {"did": "i1", "modality": "image", "img_path": "a.jpg", "source_id": "s1"},
        {"did": "t1", "modality": "text", "txt": "a cat", "src_content": json.dumps({"source_id": "s1"})},
    ], images_root=tmp_path)
    assert pool["t1"].source_id == "s1" and "i1" in pool and pool.get("x") is None
    assert pool.image_file("i1") == (tmp_path / "a.jpg").absolute()
    with pytest.raises(unirag.InputError, match=r"records\[0\].txt"):
        unirag.Pool.from_records([{"did": "t", "modality": "text"}])
    with pytest.raises(unirag.InputError, match="duplicate did"):
        unirag.Pool.from_records([{"did": "t", "modality": "text", "txt": "x"}] * 2)
    with pytest.raises(unirag.InputError, match="candidate pool not found"):
        unirag.Pool.read(tmp_path / "missing.jsonl")
    path = pool.write(tmp_path / "pool.jsonl")
    again = unirag.Pool.from_dict(unirag.Pool.read(path, tmp_path).to_dict())
    assert [c.did for c in again] == ["i1", "t1"] and again["t1"].source_id == "s1"
