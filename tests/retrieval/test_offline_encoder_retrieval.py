"""Index + retrieval through the real offline encoder (MiniLM + EfficientNet-Lite0 joint space) on real COCO.

The index records the encoder spec (None = offline default), so a Retriever opened without an encoder
reloads the same encoder from the manifest and checks its fingerprint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from index.helpers import write_coco_mbeir
from unirag import Index
from unirag.data.mbeir import read_qrels, read_queries
from unirag.encoders.registry import load_encoder
from unirag.index.manifest import read_manifest
from unirag.metrics.retrieval import evaluate_run
from unirag.retrieval.retriever import Retriever

N_IMAGES = 20


@pytest.fixture(scope="module")
def offline_index(coco_mini: Path, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    files = write_coco_mbeir(coco_mini, tmp_path_factory.mktemp("offline_mbeir"), n_images=N_IMAGES)
    out = tmp_path_factory.mktemp("offline_index") / "index"
    Index.build(files["pool"], out, encoder=load_encoder(None), images_root=coco_mini, progress=False)
    return out, files


def test_offline_index_manifest(offline_index) -> None:
    out, _ = offline_index
    manifest = read_manifest(out)
    assert manifest["counts"] == {"image": N_IMAGES, "text": 5 * N_IMAGES}
    assert manifest["encoder"]["name"] == load_encoder(None).name and manifest["encoder"]["spec"] is None


@pytest.mark.parametrize("direction,modality", [("i2t", "text"), ("t2i", "image")])
def test_offline_retrieval_beats_chance_on_real_coco(offline_index, coco_mini: Path, direction: str,
                                                     modality: str) -> None:
    out, files = offline_index
    retriever = Retriever(out)  # encoder reloaded from the manifest
    queries = read_queries(files[direction])
    qrels = read_qrels(files[f"qrels_{direction}"])
    results = retriever.retrieve(queries, 5, modality, query_images_root=coco_mini)
    metrics = evaluate_run({r.qid: r.dids for r in results}, qrels.relevant, [5])
    # chance hit@5: t2i 5/20 = 0.25; i2t (5 relevant of 100 captions) 1 - C(95,5)/C(100,5) = 0.23
    assert metrics["hit@5"] >= 0.5, metrics
    for q, r in zip(queries, results, strict=True):
        assert len(r.pairs) == 5
        if q.img_path:
            assert all(p.img_path != q.img_path for p in r.pairs)
        if q.txt:
            assert all(p.txt != q.txt for p in r.pairs)
