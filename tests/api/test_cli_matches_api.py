"""Per command family, the CLI gives what the Python API gives (retrieve and caption: test_retriever.py,
test_captioner.py; index build: test_index_and_pool.py): evaluate retrieval, generate-images, cir, and
caption runs fed live objects."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import run_cli
from PIL import Image

import unirag
from unirag.data.mbeir import read_qrels, read_queries, write_qrels, write_queries
from unirag.data.records import Modality, Query


@pytest.fixture(scope="module")
def t2i(demo, tmp_path_factory):
    """Six text->image queries and the CLI's retrieval run for them."""
    tmp = tmp_path_factory.mktemp("t2i")
    queries = read_queries(demo["t2i"])[:6]
    write_queries(tmp / "queries.jsonl", queries)
    run_cli("retrieve", "--index", demo["index"], "--queries", tmp / "queries.jsonl", "--k", 5,
            "--modality", "image", "--out", tmp / "run.jsonl")
    return {"dir": tmp, "queries": queries, "run": tmp / "run.jsonl"}


def test_evaluate_retrieval_matches_retrieval_metrics(demo, retriever, t2i, tmp_path):
    write_qrels(tmp_path / "qrels.txt", t2i["queries"])
    run_cli("evaluate", "retrieval", "--run", t2i["run"], "--qrels", tmp_path / "qrels.txt", "--k", "1,5",
            "--out", tmp_path / "m.json")
    cli = json.loads((tmp_path / "m.json").read_text())["metrics"]
    qrels = read_qrels(tmp_path / "qrels.txt")
    hits = {q.qid: retriever.search(text=q.txt, k=5, modality="image") for q in t2i["queries"]}
    api = unirag.retrieval_metrics(hits, {q.qid: qrels.get(q.qid) for q in t2i["queries"]}, k=[1, 5])
    assert cli["num_queries"] == 6 and cli["missing_queries"] == 0
    for key in ("hit@1", "hit@5", "recall@5", "mrr@5", "num_queries"):
        assert api[key] == pytest.approx(cli[key], abs=1e-9), key
    assert api["hit@5"] > 0  # the offline encoder finds some of these photos


def test_generate_images_matches_image_generator(demo, retriever, t2i, tmp_path):
    out = tmp_path / "run"
    run_cli("generate-images", "--queries", t2i["dir"] / "queries.jsonl", "--generator", "retrieval:top1",
            "--mode", "rag", "--k", 2, "--retrieval", t2i["run"], "--pool-images-root", demo["images"], "--out", out,
            "--no-progress")
    records = {r["qid"]: r for r in map(json.loads, (out / "outputs.jsonl").read_text().splitlines())}
    generator = unirag.ImageGenerator("retrieval:top1")
    for q in t2i["queries"]:
        image = generator.generate(q.txt, retriever.search(text=q.txt, k=2, modality="image"))
        assert np.array_equal(np.asarray(image), np.asarray(Image.open(out / records[q.qid]["image"])))


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_cir_baseline_matches_xr(demo, tmp_path):
    pool = unirag.Pool.read(demo["pool"], demo["images"])
    images = [c for c in pool if c.modality is Modality.IMAGE][:4]
    texts = ["make it outdoors", "with more people", "at night", "in black and white"]
    queries = [Query(qid=f"cir{i}", modality=Modality.IMAGE_TEXT, txt=t, img_path=c.img_path, task_id=7)
               for i, (c, t) in enumerate(zip(images, texts, strict=True))]
    write_queries(tmp_path / "cir.jsonl", queries)
    run_cli("cir", "--dataset", "mbeir", "--annotations", tmp_path / "cir.jsonl", "--split-file", demo["pool"],
            "--images-root", demo["images"], "--out", tmp_path / "out", "--k", 10, "--exclude-reference", "--quiet")
    cli = {r["qid"]: r["ranked"] for r in map(json.loads, (tmp_path / "out" / "rankings.jsonl").read_text()
                                             .splitlines())}
    with unirag.XR() as xr:
        api = xr.search_batch([pool.image_file(c) for c in images], texts, pool, k=10)
    for q, hits in zip(queries, api, strict=True):
        assert [h.did for h in hits] == cli[q.qid]
        assert f"coco:img:{q.img_path.split('.')[0].lstrip('0')}" not in cli[q.qid]  # the reference is left out


def test_caption_run_takes_a_live_retriever_and_in_memory_queries(demo, retriever, tmp_path):
    from unirag.pipelines.caption import CaptionConfig, run_captioning

    queries = read_queries(demo["i2t"])[:5]
    write_queries(tmp_path / "q.jsonl", queries)
    run_cli("caption", "--queries", tmp_path / "q.jsonl", "--images-root", demo["images"], "--generator",
            "retrieval:consensus", "--mode", "rag", "--k", 3, "--index", demo["index"], "--out", tmp_path / "cli",
            "--no-progress", "--option", "similarity=lexical")
    captioner = unirag.Captioner("retrieval:consensus", similarity="lexical")
    summary = run_captioning(CaptionConfig(queries=queries, generator="retrieval:consensus", out=tmp_path / "api",
                                           mode="rag", k=3, images_root=demo["images"], index=retriever,
                                           progress=False), captioner)
    assert summary["counts"]["ok"] == 5
    read = lambda d: [json.loads(x) for x in (d / "outputs.jsonl").read_text().splitlines()]  # noqa: E731
    cli, api = read(tmp_path / "cli"), read(tmp_path / "api")
    assert [(r["qid"], r["caption"], r["examples"]) for r in cli] == [(r["qid"], r["caption"], r["examples"])
                                                                     for r in api]
    manifest = json.loads((tmp_path / "api" / "manifest.json").read_text())
    assert manifest["identity"]["queries"].startswith("5 queries in memory")
    # the examples' images root came from the index, not from --images-root
    assert manifest["identity"]["pool_images_root"] == str(demo["images"].resolve())
