"""Per command family, the CLI gives what the Python API gives: evaluate captions, evaluate images,
report, run (grid) and retrieve; the commands are shells over these functions."""

from __future__ import annotations

import json
import sys

import pytest
from cli_runner import run_cli
from PIL import Image

import unirag
from tiny_models import tiny_clip_dir
from unirag.data.mbeir import read_queries, write_queries

CAPTION_KEYS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr")


def _outputs(run_dir) -> dict[str, dict]:
    return {r["qid"]: r for r in map(json.loads, (run_dir / "outputs.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def caption_run(demo, tmp_path_factory):
    """``unirag caption`` (consensus over the index, default k) on six image queries, then evaluated."""
    tmp = tmp_path_factory.mktemp("captions")
    queries = read_queries(demo["i2t"])[:6]
    write_queries(tmp / "q.jsonl", queries)
    run_cli("caption", "--queries", tmp / "q.jsonl", "--images-root", demo["images"], "--generator",
            "retrieval:consensus", "--mode", "rag", "--index", demo["index"], "--out", tmp / "run", "--no-progress",
            "--option", "similarity=lexical")
    mp = pytest.MonkeyPatch()
    mp.delenv("UNIRAG_SPICE_LIB", raising=False)
    try:
        run_cli("evaluate", "captions", "--run", tmp / "run", "--queries", tmp / "q.jsonl", "--pool", demo["pool"],
                "--no-meteor")
    finally:
        mp.undo()
    return {"dir": tmp, "queries": queries, "run": tmp / "run"}


def test_evaluate_captions_matches_caption_metrics(demo, retriever, caption_run):
    cli = json.loads((caption_run["run"] / "metrics.json").read_text())["metrics"]
    index = unirag.Index.open(demo["index"])
    captioner = unirag.Captioner("retrieval:consensus", similarity="lexical")
    predictions, references = {}, {}
    for q in caption_run["queries"]:
        image = Image.open(demo["images"] / q.img_path)
        predictions[q.qid] = captioner.caption(image, retriever.search(image=image, k=5)).text
        references[q.qid] = [index.candidate(did).txt for did in q.pos_cand_list]
    # the CLI's default k for consensus is 5 (the caption run's default), so the captions are the same
    assert predictions == {qid: r["caption"] for qid, r in _outputs(caption_run["run"]).items()}
    api = unirag.caption_metrics(predictions, references, meteor=False)
    assert list(cli)[: len(CAPTION_KEYS)] == list(CAPTION_KEYS)
    for key in CAPTION_KEYS:
        assert api[key] == pytest.approx(cli[key], abs=1e-9), key
    assert api["CIDEr"] > 0


def test_report_matches_build_report(caption_run, tmp_path):
    run_cli("report", caption_run["run"], "--out", tmp_path / "cli", "--no-plots", "--max-cards", 3)
    written = unirag.build_report([caption_run["run"]], tmp_path / "api", plots=False, max_cards=3)
    assert written["cards"] == {k: 3 for k in written["cards"]} and len(written["cards"]) == 1
    cli_tables = (tmp_path / "cli" / "tables.md").read_text()
    assert cli_tables == (tmp_path / "api" / "tables.md").read_text()
    assert "CIDEr" in cli_tables
    csvs = sorted(p.name for p in (tmp_path / "cli" / "tables").glob("*.csv"))
    assert csvs and csvs == sorted(p.name for p in (tmp_path / "api" / "tables").glob("*.csv"))
    for name in csvs:
        assert (tmp_path / "cli" / "tables" / name).read_text() == (tmp_path / "api" / "tables" / name).read_text()


def test_run_grid_cell_matches_a_caption_run_on_live_objects(demo, retriever, caption_run, tmp_path):
    from unirag.pipelines.caption import CaptionConfig, run_captioning

    q = caption_run["dir"] / "q.jsonl"
    (tmp_path / "grid.yaml").write_text(f"""
out: {tmp_path / 'out'}
queries: {q}
images_root: {demo['images']}
retrievers:
  demo: {{index: {demo['index']}}}
generators: ["retrieval:consensus"]
options: {{similarity: lexical}}
grid:
  - {{mode: rag, k: 3, retriever: demo}}
""")
    output = run_cli("run", tmp_path / "grid.yaml", "--no-progress")
    assert "1/1 cells ran" in output
    cell = tmp_path / "out" / "retrieval-consensus" / "rag-k3-demo"
    listing = run_cli("run", tmp_path / "grid.yaml", "--list")
    assert "retrieval-consensus/rag-k3-demo" in listing and "(6/6 ok)" in listing
    run_captioning(CaptionConfig(queries=caption_run["queries"], generator="retrieval:consensus", out=tmp_path / "api",
                                 mode="rag", k=3, images_root=demo["images"], index=retriever,
                                 generator_options={"similarity": "lexical"}, progress=False))
    grid, api = _outputs(cell), _outputs(tmp_path / "api")
    assert len(grid) == 6
    assert {k: (r["caption"], r["examples"]) for k, r in grid.items()} == {
        k: (r["caption"], r["examples"]) for k, r in api.items()}
    # and through the API's grid runner: nothing left to do, the same cell state
    results = unirag.run_experiment(tmp_path / "grid.yaml", progress=False, echo=lambda s: None)
    assert results == [{"cell": "retrieval-consensus/rag-k3-demo", "status": "ok",
                        "counts": {**results[0]["counts"], "ok": 6, "queries": 6}}]


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_evaluate_images_matches_image_metrics(demo, retriever, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_fidelity", None)  # FID/IS skipped alike: CLIP Score on a tiny CLIP
    queries = read_queries(demo["t2i"])[:4]
    write_queries(tmp_path / "q.jsonl", queries)
    out = tmp_path / "run"
    run_cli("generate-images", "--queries", tmp_path / "q.jsonl", "--generator", "retrieval:top1", "--mode", "rag",
            "--index", demo["index"], "--pool-images-root", demo["images"], "--out", out, "--no-progress")
    run_cli("evaluate", "images", "--run", out, "--queries", tmp_path / "q.jsonl", "--pool", demo["pool"],
            "--images-root", demo["images"], "--clip-model", tiny_clip_dir(), "--device", "cpu")
    cli = json.loads((out / "metrics.json").read_text())
    per_query = [json.loads(x) for x in (out / "metrics_per_query.jsonl").read_text().splitlines()]
    generator = unirag.ImageGenerator("retrieval:top1")
    images = [generator.generate(q.txt, retriever.search(text=q.txt, k=1)) for q in queries]
    api = unirag.image_metrics(images, [q.txt for q in queries], clip_model=tiny_clip_dir(), device="cpu",
                               per_item=True)
    assert set(cli["metrics"]) == {"CLIP Score"} and "FID" in cli["skipped_metrics"]
    assert api["CLIP Score"] == pytest.approx(cli["metrics"]["CLIP Score"], abs=1e-6)
    assert [r["qid"] for r in per_query] == [q.qid for q in queries]
    assert api["per_item"] == pytest.approx([r["CLIP Score"] for r in per_query], abs=1e-6)
    assert "FID" in api["skipped"] and "IS" in api["skipped"]


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_retrieve_matches_run_retrieval(demo, tmp_path):
    from unirag.retrieval.batch_run import run_retrieval

    output = run_cli("retrieve", "--index", demo["index"], "--queries", demo["i2t"], "--images-root", demo["images"],
                     "--k", 3, "--out", tmp_path / "cli.jsonl")
    summary = run_retrieval(demo["index"], demo["i2t"], tmp_path / "api.jsonl", k=3, query_images_root=demo["images"])
    assert (tmp_path / "cli.jsonl").read_text() == (tmp_path / "api.jsonl").read_text()
    assert (tmp_path / "cli.trec").read_text() == summary.trec_path.read_text()
    assert f"{len(summary.results)} queries ->" in output and len(summary.results) == len(read_queries(demo["i2t"]))
