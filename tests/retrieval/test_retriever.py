"""Retrieval and pair completion (paper §3.1, §5) on hand-placed vectors and on real COCO mini data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from index.helpers import HashEncoder, build_from_vectors
from unirag.data.mbeir import read_qrels, read_queries
from unirag.data.records import Modality, Qrels, Query
from unirag.errors import ConfigError
from unirag.retrieval.retriever import Retriever

DIM = 8
ENC = {"name": "hand-placed", "spec": None, "config": {}, "fingerprint": "0" * 16}


def e(*weights: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(weights)] = weights
    return v / np.linalg.norm(v)


def tiny_index(tmp_path: Path, rows: list[tuple]) -> Retriever:
    """rows: (did, modality, txt, img_path, source_id, vector)."""
    chunks = []
    for did, modality, txt, img, sid, vec in rows:
        meta = {"did": did, "txt": txt, "img_path": img, "source_id": sid}
        chunks.append((Modality.parse(modality), [meta], vec[None, :]))
    build_from_vectors(chunks, tmp_path / "idx", DIM, ENC)
    return Retriever(tmp_path / "idx")


def image_query(img_path: str = "query.jpg") -> Query:
    return Query("q1", Modality.IMAGE, img_path=img_path)


def text_query(txt: str) -> Query:
    return Query("q1", Modality.TEXT, txt=txt)


PAIRED_POOL = [
    ("T1a", "text", "a dog on a sofa", None, "s1", e(1, 0, 0)),
    ("T1b", "text", "a brown dog sleeping", None, "s1", e(1, 0.2, 0)),
    ("I1", "image", None, "a.jpg", "s1", e(1, 0, 0.3)),
    ("T2a", "text", "a cat on a car", None, "s2", e(0, 1, 0)),
    ("I2", "image", None, "b.jpg", "s2", e(0.5, 1, 0.1)),
]


def test_pairs_completed_from_the_pools_pairing(tmp_path: Path) -> None:
    r = tiny_index(tmp_path, PAIRED_POOL)
    [res] = r.retrieve_vectors([image_query()], e(1, 0, 0)[None], 2, "text")
    assert res.dids == ["T1a", "T1b"]
    assert [(p.image_did, p.text_did, p.via) for p in res.pairs] == [("I1", "T1a", "pool"),
                                                                        ("I1", "T1b", "pool")]
    assert res.pairs[0].img_path == "a.jpg" and res.pairs[0].txt == "a dog on a sofa"


def test_paired_complement_equal_to_the_query_falls_back_to_retrieval(tmp_path: Path) -> None:
    r = tiny_index(tmp_path, PAIRED_POOL)
    # the query *is* image a.jpg: its own captions must be paired with another image
    [res] = r.retrieve_vectors([image_query("a.jpg")], e(1, 0, 0)[None], 2, "text")
    assert res.dids == ["T1a", "T1b"]
    assert [(p.image_did, p.text_did, p.via) for p in res.pairs] == [("I2", "T1a", "retrieval"),
                                                                        ("I2", "T1b", "retrieval")]


def test_pool_without_pairing_completes_by_retrieval(tmp_path: Path) -> None:
    rows = [(d, m, t, i, None, v) for d, m, t, i, _, v in PAIRED_POOL]
    r = tiny_index(tmp_path, rows)
    [res] = r.retrieve_vectors([text_query("a kitten")], e(0, 1, 0)[None], 2, "image")
    assert res.dids == ["I2", "I1"]
    # I2's nearest caption is T2a; I1's is T1a (the top text hit for I1's vector)
    assert [(p.image_did, p.text_did, p.via) for p in res.pairs] == [("I2", "T2a", "retrieval"),
                                                                        ("I1", "T1a", "retrieval")]


def test_wrong_modality_hit_is_replaced_by_its_complement(tmp_path: Path) -> None:
    r = tiny_index(tmp_path, PAIRED_POOL)
    # text->image over "any": the top hit is a caption identical to the query (wrong modality)
    [res] = r.retrieve_vectors([text_query("A dog  on a SOFA")], e(1, 0, 0)[None], 2, "any")
    # (T1b, the next hit, maps to I1 again and is not repeated; I2 is a direct hit)
    assert [(c.did, c.modality, c.replaced) for c in res] == [("I1", "image", "T1a"),
                                                                         ("I2", "image", None)]
    # (I1, T1a) shows the query's own text and is dropped; I1 is paired with its other caption
    assert [(p.image_did, p.text_did) for p in res.pairs] == [("I1", "T1b"), ("I2", "T2a")]
    assert res[0].score == pytest.approx(1.0, abs=1e-5)  # score of the replaced hit


def test_exclude_positives_removes_them_from_candidates_and_pairs(tmp_path: Path) -> None:
    r = tiny_index(tmp_path, PAIRED_POOL)
    qrels = Qrels()
    qrels.add("q1", "I1")
    [res] = r.retrieve_vectors([text_query("a dog on a sofa")], e(1, 0, 0)[None], 2, "any", exclude_qrels=qrels)
    assert "I1" not in res.dids
    assert all(p.image_did != "I1" for p in res.pairs)
    assert res.dids[0] == "I2"


def test_fused_candidates_are_their_own_pair(tmp_path: Path) -> None:
    rows = PAIRED_POOL + [("F1", "image,text", "a dog in a car", "f.jpg", None, e(1, 0.1, 0.1))]
    r = tiny_index(tmp_path, rows)
    [res] = r.retrieve_vectors([image_query()], e(1, 0.1, 0.1)[None], 1, "image,text")
    assert res.dids == ["F1"]
    assert [(p.image_did, p.text_did, p.via) for p in res.pairs] == [("F1", "F1", "fused")]


def test_k_pairs_kept_when_many_hits_are_dropped(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):  # 40 captions identical to the query, each with its image
        rows.append((f"dup{i}", "text", "a red bus", None, f"d{i}", e(1, 0.01 * i, 0)))
        rows.append((f"dupimg{i}", "image", None, f"dup{i}.jpg", f"d{i}", e(0, 0, 1, 0.01 * i)))
    for i in range(5):
        rows.append((f"other{i}", "text", f"a blue bus {i}", None, f"o{i}", e(1, 1 + i, *rng.random(2))))
        rows.append((f"otherimg{i}", "image", None, f"o{i}.jpg", f"o{i}", e(0, 0, 1, 1, i)))
    r = tiny_index(tmp_path, rows)
    [res] = r.retrieve_vectors([text_query("a red bus")], e(1, 0, 0)[None], 3, "text")
    assert len(res) == 3
    assert len(res.pairs) == 3, "over-fetch must widen the search past 40 dropped pairs"
    assert all(p.txt != "a red bus" for p in res.pairs)
    assert [p.text_did for p in res.pairs] == ["other0", "other1", "other2"]


def test_k_larger_than_the_pool_returns_what_exists(tmp_path: Path) -> None:
    r = tiny_index(tmp_path, PAIRED_POOL)
    [res] = r.retrieve_vectors([image_query()], e(1, 0, 0)[None], 50, "text")
    assert sorted(res.dids) == ["T1a", "T1b", "T2a"] and len(res.pairs) == 3


def test_bad_arguments(tmp_path: Path) -> None:
    r = tiny_index(tmp_path, PAIRED_POOL)
    q = e(1, 0, 0)[None]
    for k in (0, -1):
        with pytest.raises(ConfigError, match="k must be a positive integer"):
            r.retrieve_vectors([image_query()], q, k, "text")
    with pytest.raises(ConfigError, match="unknown modality 'audio'"):
        r.retrieve_vectors([image_query()], q, 1, "audio")
    with pytest.raises(ValueError, match="1 queries but 2 vectors"):
        r.retrieve_vectors([image_query()], np.vstack([q, q]), 1, "text")
    with pytest.raises(ConfigError, match="hand-placed"):
        Retriever(tmp_path / "idx", HashEncoder())


def test_real_coco_image_to_text(coco_index: Path, coco_mbeir, coco_mini: Path, coco_oracle_encoder) -> None:
    retriever = Retriever(coco_index, coco_oracle_encoder)
    queries = read_queries(coco_mbeir["i2t"])[:40]
    qrels = read_qrels(coco_mbeir["qrels_i2t"])
    plain = retriever.retrieve(queries, 5, "text", query_images_root=coco_mini)
    clean = retriever.retrieve(queries, 5, "text", exclude_qrels=qrels, query_images_root=coco_mini)
    for q, a, b in zip(queries, plain, clean, strict=True):
        assert a.qid == b.qid == q.qid
        assert len(a) == len(b) == 5 and len(a.pairs) == len(b.pairs) == 5
        assert {c.modality for c in a} == {"text"}
        assert set(a.dids) & qrels.get(q.qid)  # the oracle encoder finds an own caption
        assert not set(b.dids) & qrels.get(q.qid)
        for p in a.pairs + b.pairs:  # the query image never appears in its own examples
            assert p.img_path != q.img_path and p.image_did != f"img:{q.qid.split(':')[1]}"
        assert not {p.text_did for p in b.pairs} & qrels.get(q.qid)
    assert np.mean([a.dids[0] in qrels.get(a.qid) for a in plain]) >= 0.8


def test_real_coco_text_to_image_over_any(coco_index: Path, coco_mbeir, coco_oracle_encoder) -> None:
    retriever = Retriever(coco_index, coco_oracle_encoder)
    queries = read_queries(coco_mbeir["t2i"])[:40]
    results = retriever.retrieve(queries, 3, "any")
    replaced = 0
    for q, res in zip(queries, results, strict=True):
        assert {c.modality for c in res} == {"image"}
        replaced += sum(1 for c in res if c.replaced)
        assert res.dids[0] == q.pos_cand_list[0]
        assert len(res.pairs) == 3 and all(p.txt.strip().lower() != q.txt.strip().lower() for p in res.pairs)
        # one pair per retrieved image: the captions of one image never fill several example slots
        assert len({p.image_did for p in res.pairs}) == 3
    # every query caption is itself in the pool, so the top hit over "any" is that caption, replaced
    assert replaced >= len(queries)
