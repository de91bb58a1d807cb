"""``unirag.ImageGenerator``, ``unirag.XR`` and the metric functions on in-memory data."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import unirag
from unirag.data.mbeir import read_queries


def test_image_generator_top1_returns_the_first_examples_picture(demo, retriever):
    q = read_queries(demo["t2i"])[0]
    hits = retriever.search(text=q.txt, k=3, modality="image")
    with unirag.ImageGenerator("retrieval:top1") as gen:
        image = gen.generate(q.txt, hits)
        assert np.array_equal(np.asarray(image), np.asarray(Image.open(hits.pairs[0].image).convert("RGB")))
        result = gen.generate_result(q.txt, hits)
        assert result.meta["source"] == hits.pairs[0].image_did
        with pytest.raises(unirag.ConfigError, match="at least 1 example"):
            gen.generate(q.txt)
        in_memory = gen.generate(q.txt, [(Image.open(hits.pairs[0].image), "x")])  # test_image_examples.py
        assert np.array_equal(np.asarray(in_memory), np.asarray(image))
        with pytest.raises(unirag.ConfigError, match="non-empty caption"):
            gen.generate("  ", hits)
    assert unirag.ImageGenerator.from_dict(gen.to_dict()).to_dict() == gen.to_dict()
    with pytest.raises(unirag.ConfigError, match="unknown image generator spec"):
        unirag.ImageGenerator("paint:x")


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_xr_baseline_ranks_the_gallery_by_the_fused_query(demo):
    index = unirag.Index.open(demo["index"])
    encoder = index.load_encoder()
    ref = demo["images"] / read_queries(demo["i2t"])[0].img_path
    text = "the same scene but outdoors"
    with unirag.XR() as xr:
        hits = xr.search(Image.open(ref), text, index, k=5)
        again = xr.search(ref, text, index.pool, k=5)
        written = {p.name for p in xr.work_dir.iterdir()}
    assert written <= {"cache", "references"}  # ranked in memory: no run folder, only the caches
    pool = index.pool
    images = [c for c in pool if c.modality.value == "image" and pool.image_file(c) != ref.absolute()]
    gallery = encoder.encode_images([pool.image_file(c) for c in images])
    query = encoder.encode_fused([ref], [text])[0]
    expected = [images[i].did for i in np.argsort(-(gallery @ query), kind="stable")[:5]]
    assert [h.did for h in hits] == expected == [h.did for h in again]
    assert {(h.stage, h.score, h.modality) for h in hits} == {("baseline", None, "image")}
    assert isinstance(hits[0], unirag.Hit)


def test_xr_refuses_an_empty_gallery_and_bad_text(demo):
    with unirag.XR() as xr:
        with pytest.raises(unirag.ConfigError, match="no images"):
            xr.search(demo["images"] / "000000397133.jpg", "red", {})
        with pytest.raises(unirag.ConfigError, match="modification text"):
            xr.search(demo["images"] / "000000397133.jpg", " ", [demo["images"] / "000000397133.jpg"])


def test_retrieval_metrics_on_hits_and_lists():
    hit = unirag.Hit("d2", 0.9, "text")
    rankings = {"q1": unirag.Hits([unirag.Hit("d1", 1.0, "text"), hit]), "q2": ["x", "y", "z"]}
    m = unirag.retrieval_metrics(rankings, {"q1": {"d2", "d9"}, "q2": {"z"}, "q3": {"a"}}, k=[1, 3])
    assert m["hit@1"] == 0.0 and m["hit@3"] == pytest.approx(2 / 3)
    assert m["recall@3"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert m["mrr@3"] == pytest.approx((1 / 2 + 1 / 3) / 3) and m["missing_queries"] == 1
    with pytest.raises(unirag.ConfigError, match="cutoffs"):
        unirag.retrieval_metrics(rankings, {"q1": {"d2"}}, k=[0])


def test_cir_metrics_follow_the_benchmarks():
    rankings = {"a": ["r", "t1", "x", "t2"], "b": ["y", "z", "t3"]}
    m = unirag.cir_metrics(rankings, {"a": ["t1", "t2"], "b": "t3"}, k=[1, 2], map_k=[4],
                           subsets={"a": ["r", "t1"], "b": ["t3", "y"]}, references={"a": "r"}, subset_k=[1])
    assert m["R@1"] == 0.0 and m["R@2"] == 50.0
    # AP@4 of a: (1/2 + 2/4) / min(4, 2) = 0.5; of b: (1/3) / 1
    assert m["mAP@4"] == pytest.approx(100 * (0.5 + 1 / 3) / 2)
    assert m["R_subset@1"] == 50.0  # a: t1 first once r is removed; b: y precedes t3


def test_caption_metrics_on_dicts():
    refs = {"1": ["a dog runs on the grass", "a brown dog running"], "2": ["a plate of food on a table"]}
    perfect = unirag.caption_metrics({"1": "a dog runs on the grass", "2": "a plate of food on a table"}, refs,
                                     meteor=False)
    worse = unirag.caption_metrics({"1": "Caption: a cat sleeps", "2": "a car"}, refs, meteor=False)
    assert perfect["BLEU-1"] > 99 and worse["BLEU-1"] < perfect["BLEU-1"] and "METEOR" not in perfect
    with pytest.raises(unirag.ConfigError, match="same ids"):
        unirag.caption_metrics({"1": "x"}, refs)
