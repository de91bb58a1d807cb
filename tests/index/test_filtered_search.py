"""Filtered search (``where=``): the filter runs inside FAISS (ID selectors), so a filtered top-k is
the exact top-k of the matching candidates, checked here against brute force over the matching
vectors, across several shards and both modalities."""

from __future__ import annotations

import json

import numpy as np
import pytest

from index.helpers import build_from_vectors
from unirag.data.records import Modality
from unirag.errors import ConfigError
from unirag.index.handle import Index

DIM = 16
ENC = {"name": "random", "spec": None, "config": {}, "fingerprint": "f" * 16}
N_TEXT, N_IMAGE = 900, 300
DATASETS = ("9", "0", "mscoco", "webqa")  # M-BEIR ids and unirag importer names as did prefixes
SPLITS = ("train", "val", "test")


def _unit(rng, n):
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Random vectors; each candidate gets a dataset prefix, a split and a numeric year in src_content
    (one in 50 has no src_content, one in 50 malformed JSON). Shards of 128 vectors."""
    rng = np.random.default_rng(7)
    rows = {Modality.TEXT: [], Modality.IMAGE: []}
    vecs = {Modality.TEXT: _unit(rng, N_TEXT), Modality.IMAGE: _unit(rng, N_IMAGE)}
    for modality, n in ((Modality.TEXT, N_TEXT), (Modality.IMAGE, N_IMAGE)):
        for i in range(n):
            ds = DATASETS[int(rng.integers(len(DATASETS)))]
            src = json.dumps({"split": SPLITS[int(rng.integers(3))], "year": int(rng.integers(2010, 2013)),
                              "meta": {"source": "flickr" if i % 2 else "web"}})
            if i % 50 == 0:
                src = None
            elif i % 50 == 1:
                src = "{not json"
            rows[modality].append({"did": f"{ds}:{modality.value}:{i}", "txt": f"t{i}" if modality.has_text else None,
                                   "img_path": f"{i}.jpg" if modality.has_image else None, "source_id": None,
                                   "src_content": src})
    chunks = [(m, rows[m][s : s + 100], vecs[m][s : s + 100]) for m in rows for s in range(0, len(rows[m]), 100)]
    out = tmp_path_factory.mktemp("filtered") / "idx"
    build_from_vectors(chunks, out, DIM, ENC, params={"shard_size": 128})
    index = Index.open(out)
    assert len(index.subs[Modality.TEXT].shards) > 1
    metas = [*rows[Modality.TEXT], *rows[Modality.IMAGE]] if list(index.subs)[0] is Modality.TEXT else \
        [*rows[Modality.IMAGE], *rows[Modality.TEXT]]
    all_vecs = np.concatenate([vecs[m] for m in index.subs])
    return index, metas, all_vecs, [m for m in index.subs for _ in range(index.subs[m].count)]


def _matches(meta: dict, modality: Modality, where: dict) -> bool:
    ids = {"mscoco": {"9", "mscoco", "coco"}, "9": {"9", "mscoco", "coco"}, "0": {"0", "visualnews"},
           "webqa": {"2", "webqa"}}
    for field, values in where.items():
        values = [values] if isinstance(values, str) else values
        if field == "dataset":
            if not any(meta["did"].split(":")[0] in ids[v] for v in values):
                return False
        elif field == "modality":
            if modality.value not in values:
                return False
        else:
            try:
                data = json.loads(meta["src_content"]) if meta["src_content"] else None
            except json.JSONDecodeError:
                data = None
            for part in field.split("."):
                data = data.get(part) if isinstance(data, dict) else None
            if data is None or str(data) not in values:
                return False
    return True


@pytest.mark.parametrize("where", [
    {"dataset": "mscoco"},
    {"dataset": ["0", "webqa"]},
    {"split": "val"},
    {"split": ["val", "test"], "dataset": "9"},
    {"year": "2011", "modality": ["image", "text"]},
    {"split": "test", "modality": "text"},
    {"meta.source": "flickr", "split": "train"},
])
@pytest.mark.parametrize("modality", [None, "text"])
def test_filtered_topk_equals_brute_force_over_the_matching_candidates(corpus, where, modality) -> None:
    index, metas, vecs, mods = corpus
    rng = np.random.default_rng(1)
    queries = _unit(rng, 6)
    keep = np.array([_matches(m, mod, where) and (modality is None or mod.value == modality)
                     for m, mod in zip(metas, mods, strict=True)])
    assert 0 < keep.sum() < len(keep)
    k = 25
    scores, ids = index.topk(queries, k, modality, where=where)
    sims = queries @ vecs.T
    sims[:, ~keep] = -np.inf
    expected = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    got_valid = ids >= 0
    assert got_valid.sum(axis=1).tolist() == [min(k, int(keep.sum()))] * len(queries)
    assert keep[ids[got_valid]].all()  # only matching candidates come back
    np.testing.assert_allclose(scores[got_valid], np.take_along_axis(sims, expected, axis=1)[got_valid], rtol=1e-5)
    assert (ids[got_valid] == expected[got_valid]).mean() > 0.99  # same ranking (ties aside)
    assert index.scope(modality, where) == int(keep.sum())


def test_filter_with_more_slots_than_matches_pads_and_no_match_is_empty(corpus) -> None:
    index, metas, vecs, mods = corpus
    q = _unit(np.random.default_rng(2), 1)
    scores, ids = index.topk(q, 5, None, where={"dataset": "mscoco", "year": "1999"})
    assert (ids == -1).all() and np.isneginf(scores).all()
    # a filter matching every candidate of a modality searches it unrestricted
    full = index.topk(q, 10, "image")
    assert np.array_equal(index.topk(q, 10, "image", where={"modality": "image"})[1], full[1])


def test_old_index_without_src_content_refuses_src_content_filters_but_filters_dataset(corpus, tmp_path) -> None:
    import shutil
    import sqlite3

    index = corpus[0]
    copy = tmp_path / "old"
    shutil.copytree(index.path, copy)
    from unirag.index.manifest import read_manifest

    manifest = read_manifest(copy)
    db_path = copy / manifest["data"] / manifest["meta_file"]
    db = sqlite3.connect(db_path)
    db.execute("ALTER TABLE meta DROP COLUMN src_content")
    db.commit()
    db.close()
    # the manifest records file sizes: refresh them for the edited metadata file
    manifest["files"][db_path.name]["size"] = db_path.stat().st_size
    (copy / "manifest.json").write_text(json.dumps(manifest))
    old = Index.open(copy)
    q = _unit(np.random.default_rng(3), 1)
    assert (old.topk(q, 5, None, where={"dataset": "9"})[1] >= 0).all()
    with pytest.raises(ConfigError, match="rebuild the index"):
        old.topk(q, 5, None, where={"split": "val"})
