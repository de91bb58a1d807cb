"""Opening and searching an index: modality restriction, ANN types, integrity and encoder checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from index.helpers import HashEncoder, build_from_vectors, clustered_vectors
from unirag.data.records import Modality
from unirag.errors import ConfigError, InputError
from unirag.index.handle import Index
from unirag.index.manifest import verify_files

ENC = {"name": "vectors", "spec": None, "config": {}, "fingerprint": "f" * 16}


def _chunks(vectors: np.ndarray, modality: Modality = Modality.TEXT, size: int = 1000, prefix: str = "d"):
    for s in range(0, len(vectors), size):
        block = vectors[s : s + size]
        yield modality, [{"did": f"{prefix}{s + i}"} for i in range(len(block))], block


def test_modality_restricted_and_any_search(coco_index: Path, coco_oracle_encoder) -> None:
    index = Index.open(coco_index, coco_oracle_encoder)
    q = coco_oracle_encoder.encode_texts(["A man is in a kitchen making pizzas.", "a tennis player"])
    for modality, expected in (("text", Modality.TEXT), ("image", Modality.IMAGE)):
        scores, ids = index.topk(q, 20, modality)
        assert {index.metas[g].modality for g in ids.ravel()} == {expected}
        assert np.all(np.diff(scores, axis=1) <= 1e-6)
    scores, ids = index.topk(q, 20, "any")
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
    # "any" is the exact merge of the two restricted searches
    st, it = index.topk(q, 20, "text")
    si, ii = index.topk(q, 20, "image")
    merged = np.sort(np.concatenate([st, si], axis=1), axis=1)[:, ::-1][:, :20]
    np.testing.assert_allclose(scores, merged, atol=1e-6)
    # the exact caption is the top text hit with score 1
    assert index.metas[it[0, 0]].did == "txt:397133:0" and st[0, 0] == pytest.approx(1.0, abs=1e-5)
    # absent modality and k beyond the pool
    s, g = index.topk(q, 3, "image,text")
    assert s.shape == g.shape == (2, 3) and (g == -1).all() and np.isinf(s).all()
    s, g = index.topk(q[:1], 2000, "image")  # k slots per query, whatever the sub-index holds (51 photos)
    assert g.shape == (1, 2000) and (g[0, :51] >= 0).all() and (g[0, 51:] == -1).all()


def test_search_bad_arguments(coco_index: Path) -> None:
    index = Index.open(coco_index)
    q = np.zeros((1, index.dim), dtype=np.float32)
    with pytest.raises(ConfigError, match="unknown modality 'video'"):
        index.topk(q, 5, "video")
    for k in (0, -3):
        with pytest.raises(ConfigError, match="k must be a positive integer"):
            index.topk(q, k, "text")
    with pytest.raises(ValueError, match="shape"):
        index.topk(np.zeros((1, 3), dtype=np.float32), 5)


def test_encoder_mismatch_is_refused_with_both_names(coco_index: Path) -> None:
    with pytest.raises(ConfigError) as e:
        Index.open(coco_index, HashEncoder(name="some-other-encoder"))
    assert "test-coco-oracle" in str(e.value) and "some-other-encoder" in str(e.value)


def test_missing_and_corrupt_index_files(coco_index: Path, tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(InputError, match="index directory not found"):
        Index.open(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="manifest.json is missing"):
        Index.open(tmp_path / "empty")
    copy = tmp_path / "copy"
    shutil.copytree(coco_index, copy)
    text_faiss = next(copy.glob("data-*/text.00000.faiss"))
    data = bytearray(text_faiss.read_bytes())
    data[len(data) // 2] ^= 0xFF
    text_faiss.write_bytes(bytes(data))
    # open checks sizes only: the flipped byte goes unnoticed, and no file is hashed
    import hashlib

    def no_hashing(*args, **kwargs):
        raise AssertionError("open must not hash index files")

    with monkeypatch.context() as m:
        m.setattr(hashlib, "sha256", no_hashing)
        assert Index.open(copy).counts == {"text": 255, "image": 51}
    # verify (and open(verify=True)) re-hash and name the file
    for check in (lambda: verify_files(copy), lambda: Index.open(copy, verify=True)):
        with pytest.raises(InputError) as e:
            check()
        assert "text.00000.faiss" in str(e.value) and "checksum mismatch" in str(e.value)
    text_faiss.unlink()
    with pytest.raises(InputError, match="missing"):
        Index.open(copy)
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="corrupt manifest"):
        Index.open(copy)
    (copy / "manifest.json").write_text(json.dumps({"format": "unirag-index", "format_version": 1}))
    with pytest.raises(InputError, match="format version 1 is not supported.*rebuild the index"):
        Index.open(copy)


def test_truncated_file_is_caught_by_size_on_open(coco_index: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(coco_index, copy)
    for name in ("image.00000.faiss", "meta.sqlite"):
        path = next(copy.glob(f"data-*/{name}"))
        original = path.read_bytes()
        path.write_bytes(original[: len(original) // 3])
        with pytest.raises(InputError) as e:
            Index.open(copy)
        assert name in str(e.value) and "truncated" in str(e.value)
        path.write_bytes(original)
    assert len(Index.open(copy)) == 306


@pytest.mark.parametrize("index_type,params", [("hnsw", {}), ("ivfpq", {"nprobe": 16})])
def test_ann_indexes_recall_against_exact(index_type: str, params: dict, tmp_path: Path) -> None:
    data = clustered_vectors(6000, 64, seed=0)
    queries = clustered_vectors(100, 64, seed=1)
    exact = build_from_vectors(_chunks(data), tmp_path / "flat", 64, ENC)
    ann = build_from_vectors(_chunks(data), tmp_path / index_type, 64, ENC, index_type, params)
    assert exact["subindexes"]["text"]["type"] == "flat"
    assert ann["subindexes"]["text"]["type"] == index_type
    _, truth = Index.open(tmp_path / "flat").topk(queries, 10, "text")
    ann_index = Index.open(tmp_path / index_type)
    _, got = ann_index.topk(queries, 10, "text")
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, got, strict=True)])
    assert recall >= 0.9, f"{index_type} recall@10 {recall:.3f}"
    # stored vectors come back exactly (refined IVF-PQ keeps the raw vectors on disk) for pair completion
    np.testing.assert_allclose(ann_index.vectors([5])[0], data[5], atol=1e-6)
    if index_type == "ivfpq":
        sub = ann["subindexes"]["text"]["params"]
        # auto nlist 4*sqrt(6000) -> 2**8 = 256, capped at 39 training points per centroid: 6000 // 39 = 153;
        # pq_m: ~8 dimensions per sub-quantiser, 64 / 8 = 8; train_size: the documented default
        assert sub["nlist"] == 6000 // 39 == 153 and sub["pq_m"] == 64 // 8 and sub["train_size"] == 131072


def test_ivfpq_on_a_small_pool_falls_back_to_exact(tmp_path: Path) -> None:
    data = clustered_vectors(300, 32)
    manifest = build_from_vectors(_chunks(data), tmp_path / "idx", 32, ENC, "ivfpq")
    entry = manifest["subindexes"]["text"]
    assert entry["type"] == "flat" and "ivfpq needs" in entry["params"]["reason"]
    _, ids = Index.open(tmp_path / "idx").topk(data[:3], 1, "text")
    assert ids[:, 0].tolist() == [0, 1, 2]


def test_unknown_index_type_and_param(tmp_path: Path) -> None:
    data = clustered_vectors(10, 8)
    with pytest.raises(ConfigError, match="unknown index type 'lsh'"):
        build_from_vectors(_chunks(data), tmp_path / "a", 8, ENC, "lsh")
    with pytest.raises(ConfigError, match="unknown parameter 'nprobes'"):
        build_from_vectors(_chunks(data), tmp_path / "a", 8, ENC, "ivfpq", {"nprobes": 3})
    assert list(tmp_path.iterdir()) == []
