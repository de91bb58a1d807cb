"""``pairs_from``: true image-caption pairs from M-BEIR judgements for a pool without pairing (as
M-BEIR's MSCOCO pool), tried before retrieval completion; each pair says how it was made."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.helpers import write_coco_mbeir
from unirag import Index
from unirag.data.mbeir import read_qrels, read_queries
from unirag.errors import ConfigError
from unirag.retrieval.retriever import Retriever


@pytest.fixture(scope="module")
def unpaired(coco_mini: Path, coco_oracle_encoder, tmp_path_factory):
    files = write_coco_mbeir(coco_mini, tmp_path_factory.mktemp("unpaired"), pairing=False)
    out = tmp_path_factory.mktemp("unpaired_index") / "index"
    Index.build(files["pool"], out, encoder=coco_oracle_encoder, images_root=coco_mini, progress=False)
    return Retriever(out, coco_oracle_encoder), files


def _image_of_caption(did: str) -> str:
    return "img:" + did.split(":")[1]  # txt:<image id>:<j> describes img:<image id>


def test_pairs_from_pairs_each_caption_with_the_image_its_qrels_name(unpaired, coco_mini) -> None:
    retriever, files = unpaired
    queries = read_queries(files["i2t"])
    qrels = read_qrels(files["qrels_i2t"])
    pairs_from = [files["i2t"], files["t2i"], files["qrels_i2t"], files["qrels_t2i"]]
    plain = retriever.retrieve(queries, 5, "text", exclude_qrels=qrels, query_images_root=coco_mini)
    assert {p.via for r in plain for p in r.pairs} == {"retrieval"}  # no pairing in the pool
    results = retriever.retrieve(queries, 5, "text", exclude_qrels=qrels, query_images_root=coco_mini,
                                 selection={"pairs_from": [str(p) for p in pairs_from]})
    pairs = [p for r in results for p in r.pairs]
    assert len(pairs) == 5 * len(queries)
    assert {p.via for p in pairs} == {"qrels"}
    assert all(p.image_did == _image_of_caption(p.text_did) for p in pairs)
    assert [r.dids for r in results] == [r.dids for r in plain]


def test_pairs_from_completes_retrieved_images_with_their_own_captions(unpaired, coco_mini) -> None:
    """text -> image: each retrieved image gets one of its own captions (task 3 judgements)."""
    retriever, files = unpaired
    queries = read_queries(files["t2i"])
    results = retriever.retrieve(queries, 3, "image", query_images_root=coco_mini,
                                 selection={"pairs_from": [str(files["i2t"])]})
    pairs = [p for r in results for p in r.pairs]
    assert pairs and {p.via for p in pairs} == {"qrels"}
    assert all(p.image_did == _image_of_caption(p.text_did) for p in pairs)
    for q, r in zip(queries, results, strict=True):  # a pair never shows the query's own caption
        assert all(p.txt != q.txt for p in r.pairs)


def test_pairs_from_needs_query_files(unpaired) -> None:
    retriever, files = unpaired
    with pytest.raises(ConfigError, match="query files"):
        retriever.search(text="a dog", k=2, pairs_from=[str(files["qrels_i2t"])])
