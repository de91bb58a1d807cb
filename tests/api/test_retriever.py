"""``unirag.Retriever`` gives what ``unirag retrieve`` gives, for images in any form and for texts."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from cli_runner import run_cli
from PIL import Image

import unirag
from unirag.data.mbeir import read_qrels, read_queries, write_queries

N_QUERIES = 12  # enough to cover replaced, dropped and completed pairs; keeps the suite quick


def _cli_run(demo, tmp_path, queries, *extra) -> tuple[list, dict[str, dict]]:
    """The first N_QUERIES queries of a file and what ``unirag retrieve`` returns for them."""
    subset = read_queries(queries)[:N_QUERIES]
    write_queries(tmp_path / "queries.jsonl", subset)
    out = tmp_path / "run.jsonl"
    run_cli("retrieve", "--index", demo["index"], "--queries", tmp_path / "queries.jsonl",
            "--images-root", demo["images"], "--k", 5, "--out", out, *extra)
    return subset, {r["qid"]: r for r in map(json.loads, out.read_text().splitlines())}


def _assert_same(hits, line: dict) -> None:
    assert hits.dids == [c["did"] for c in line["candidates"]]
    np.testing.assert_allclose([h.score for h in hits], [c["score"] for c in line["candidates"]], atol=1e-6)
    assert [h.modality for h in hits] == [c["modality"] for c in line["candidates"]]
    assert [(p.image_did, p.text_did, p.img_path, p.caption) for p in hits.pairs] == \
        [(p["image_did"], p["text_did"], p["img_path"], p["txt"]) for p in line["pairs"]]


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_image_search_matches_the_cli(demo, retriever, tmp_path):
    queries, lines = _cli_run(demo, tmp_path, demo["i2t"])
    images = [Image.open(demo["images"] / q.img_path) for q in queries]
    for q, hits in zip(queries, retriever.search_batch(images, k=5), strict=True):
        _assert_same(hits, lines[q.qid])
        assert all(p.img_path != q.img_path for p in hits.pairs)  # the query photo is never its own example


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_text_search_and_excluded_positives_match_the_cli(demo, retriever, tmp_path):
    queries, lines = _cli_run(demo, tmp_path, demo["t2i"], "--modality", "image",
                              "--exclude-positives", demo["qrels_t2i"])
    qrels = read_qrels(demo["qrels_t2i"])
    for q in queries:
        hits = retriever.search(text=q.txt, k=5, modality="image", exclude=qrels.get(q.qid))
        _assert_same(hits, lines[q.qid])
        assert not set(hits.dids) & qrels.get(q.qid)
        assert all(h.modality == "image" for h in hits)


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_every_image_form_gives_the_same_hits(demo, retriever):
    path = demo["images"] / read_queries(demo["i2t"])[3].img_path
    by_path = retriever.search(path, k=5)
    pil = Image.open(path).convert("RGB")
    buf = io.BytesIO()
    pil.save(buf, format="PNG")
    for image in (str(path), Image.open(path), buf.getvalue(), np.asarray(pil)):
        hits = retriever.search(image, k=5)
        assert hits.dids == by_path.dids
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in by_path], atol=1e-6)


def test_hits_carry_absolute_pairs_and_complement_the_wrong_modality(demo, retriever):
    q = read_queries(demo["i2t"])[0]
    hits = retriever.search(demo["images"] / q.img_path, k=5)
    assert len(hits) == 5 and len(hits.pairs) == 5
    for p in hits.pairs:
        assert p.image.is_absolute() and p.image.is_file()
        assert isinstance(p.caption, str) and p.caption.strip()
    # over "any" an image query gets captions; the query image itself came back and was replaced
    assert all(h.modality == "text" for h in hits)
    assert any(h.replaced == f"coco:img:{q.qid.rsplit(':', 1)[1]}" for h in hits)
    assert all(h.pair is None or h.pair in hits.pairs for h in hits)
    assert sum(h.pair is not None for h in hits) >= 3  # the hits carry the pairs they complete to


def test_fused_query_differs_from_image_alone(demo, retriever):
    path = demo["images"] / read_queries(demo["i2t"])[0].img_path
    fused = retriever.search(path, "a snowboarder jumping over a ramp", k=5, modality="image")
    plain = retriever.search(path, k=5, modality="image")
    assert fused.dids != plain.dids or [h.score for h in fused] != [h.score for h in plain]


def test_bad_queries_fail_clearly(retriever):
    with pytest.raises(unirag.ConfigError, match="give an image, a text, or both"):
        retriever.search()
    with pytest.raises(unirag.ConfigError, match="k must be a positive integer"):
        retriever.search(text="a dog", k=0)
    with pytest.raises(unirag.ConfigError, match="unknown modality"):
        retriever.search(text="a dog", modality="video")
    with pytest.raises(unirag.InputError, match="image file not found") as e:
        retriever.search("/nonexistent/photo.jpg")
    assert "text=" not in str(e.value)  # a path that is missing: no hint about texts
    with pytest.raises(unirag.InputError, match=r"reads like a text.*search\(text='red dress for women'\)"):
        retriever.search("red dress for women")
    with pytest.raises(unirag.InputError, match=r"field 'image': expected an image .*got object"):
        retriever.search(object())


def test_to_dict_round_trip(demo, retriever):
    again = unirag.Retriever.from_dict(json.loads(json.dumps(retriever.to_dict())))
    assert again.search(text="a cat on a couch").dids == retriever.search(text="a cat on a couch").dids
