"""Run-directory bookkeeping, and RAG examples retrieved on the fly from an index."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from unirag.errors import ConfigError
from unirag.runs.rundir import RunDir


def test_rundir_identity_interrupt_and_compaction(tmp_path):
    out = tmp_path / "run"
    with RunDir(out, "caption", {"k": 1}) as run:
        for q in ("a", "b", "c"):
            run.store.append({"qid": q, "status": "ok", "caption": q, "usage": {"output_tokens": 2}, "cost_usd": 0.5})
        run.store.append({"qid": "b", "status": "error", "error": "boom"}, replace=True)
        counts = run.finish(["a", "b"])  # a --limit 2 rerun of a longer run
    assert counts == {"queries": 2, "ok": 1, "error": 1, "missing": 0}
    lines = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert [(r["qid"], r["status"]) for r in lines] == [("a", "ok"), ("b", "error"), ("c", "ok")]  # c kept
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "incomplete" and m["totals"]["cost_usd"] == 0.5 and m["totals"]["usage"]["output_tokens"] == 2
    with pytest.raises(ConfigError, match="different configuration.*k: 1 -> 2"):
        RunDir(out, "caption", {"k": 2}).__enter__()
    with pytest.raises(ConfigError, match="holds a 'caption' run"):
        RunDir(out, "image", {"k": 1}).__enter__()
    with pytest.raises(KeyboardInterrupt), RunDir(out, "caption", {"k": 1}):
        raise KeyboardInterrupt
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["resumed"] is True


def test_two_runs_share_a_run_dir_only_with_the_same_configuration(tmp_path):
    with RunDir(tmp_path, "caption", {"k": 1}) as first:
        with pytest.raises(ConfigError, match="different configuration"):
            RunDir(tmp_path, "caption", {"k": 2}).__enter__()
        with RunDir(tmp_path, "caption", {"k": 1}) as second:
            first.store.append({"qid": "a", "status": "ok", "caption": "from first"})
            assert second.store.is_done("a")  # the second run sees the first's finished query
            assert second.store.append({"qid": "a", "status": "ok", "caption": "again"})["caption"] == "from first"
            second.store.append({"qid": "b", "status": "ok", "caption": "from second"})
            assert second.finish(["a", "b"])["ok"] == 2
        assert first.finish(["a", "b"])["ok"] == 2
    lines = [json.loads(x) for x in (tmp_path / "outputs.jsonl").read_text().splitlines()]
    assert [(r["qid"], r["caption"]) for r in lines] == [("a", "from first"), ("b", "from second")]


def test_rag_examples_retrieved_on_the_fly_from_an_index(coco_set, tmp_path):
    from tiny_models import tiny_clip_dir
    from unirag.cli.main import cli

    index = tmp_path / "index"
    runner = CliRunner()
    built = runner.invoke(cli, ["index", "build", "--pool", str(coco_set["pool"]), "--images-root",
                                str(coco_set["images_root"]), "--out", str(index), "--encoder", str(tiny_clip_dir())])
    assert built.exit_code == 0, built.output
    out = tmp_path / "run"
    result = runner.invoke(cli, ["caption", "--queries", str(coco_set["queries"]), "--images-root",
                                 str(coco_set["images_root"]), "--generator", "retrieval:top1", "--mode", "rag",
                                 "--k", "2", "--index", str(index), "--pool", str(coco_set["pool"]), "--out", str(out),
                                 "--limit", "4", "--no-progress"])
    assert result.exit_code == 0, result.output
    recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    rows = {f"q{r['image_id']}": r for r in coco_set["rows"]}
    all_captions = {c for r in coco_set["rows"] for c in r["captions"]}
    assert len(recs) == 4
    for r in recs:
        assert r["status"] == "ok" and len(r["examples"]) == 2
        assert all(e["img_path"] != rows[r["qid"]]["image"] for e in r["examples"])  # never the query image
    # retrieval:top1 is the top candidate's caption, or its source item's caption for an image (the official
    # baseline: castorini/UniRAG src/unirag/eval_caption_generation.py at commit 0a6e6a36 :151-164), even when
    # that is one of the query's own captions
    from unirag.data.mbeir import load_pool, read_queries
    from unirag.retrieval.retriever import Retriever

    pool = load_pool(coco_set["pool"])
    results = {res.qid: res for res in Retriever(index).retrieve(read_queries(coco_set["queries"])[:4], 2, "any",
                                                                  query_images_root=coco_set["images_root"])}
    for r in recs:
        top = pool[results[r["qid"]][0].did]
        expected = top.txt or next(c.txt for c in pool.values() if c.source_id == top.source_id and c.txt)
        assert r["caption"] == expected and r["caption"] in all_captions
    m = json.loads((out / "manifest.json").read_text())
    assert m["identity"]["examples"]["index"] == str(index)


def test_lines_torn_by_a_crash_are_reported_in_the_manifest(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "outputs.jsonl").write_text('{"qid": "a", "status": "ok"}\n{"qid": "b", "sta\n{"qid": "c", "status": "ok"}\n')
    with RunDir(out, "caption", {"k": 1}) as run:
        counts = run.finish(["a", "b", "c"])
    assert counts == {"queries": 3, "ok": 2, "error": 0, "missing": 1}  # b is redone by the next run
    m = json.loads((out / "manifest.json").read_text())
    assert m["dropped_lines"] == {"count": 1, "first_line_numbers": [2]}
