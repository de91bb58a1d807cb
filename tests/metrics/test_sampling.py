"""Caption sampling ablation on the real COCO captions (5 per image)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from unirag.cli.main import cli
from unirag.data.mbeir import read_queries, write_queries
from unirag.data.records import Modality, Query
from unirag.errors import InputError
from unirag.reports.sampling import compare_sample_runs, sample_one_per_image


@pytest.fixture(scope="module")
def caption_queries(coco_mini):
    rows = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines() if x.strip()]
    return [Query(qid=f"9:{r['image_id']}-{j}", modality=Modality.TEXT, txt=c, pos_cand_list=[f"img:{r['image_id']}"],
                  task_id=0) for r in rows for j, c in enumerate(r["captions"])]


def test_one_caption_per_image_seeded(caption_queries, tmp_path):
    images = {q.pos_cand_list[0] for q in caption_queries}
    a = sample_one_per_image(caption_queries, seed=1)
    assert len(a) == len(images) == 51
    assert {q.pos_cand_list[0] for q in a} == images
    assert [q.qid for q in a] == [q.qid for q in sample_one_per_image(caption_queries, seed=1)]
    b = sample_one_per_image(caption_queries, seed=2)
    write_queries(tmp_path / "a.jsonl", a)
    write_queries(tmp_path / "b.jsonl", b)
    overlap = compare_sample_runs(tmp_path / "a.jsonl", tmp_path / "b.jsonl")["overlap"]
    assert overlap["common_images"] == 51 and overlap["images_a"] == overlap["images_b"] == 51
    # 5 captions per image: two independent draws agree on about 1/5 of the images
    assert 10 < overlap["common_captions"] < 60
    assert overlap["common_captions"] == len({q.qid for q in a} & {q.qid for q in b})


def test_query_without_positive_is_rejected():
    with pytest.raises(InputError, match="no positive image"):
        sample_one_per_image([Query(qid="x", modality=Modality.TEXT, txt="a dog")], seed=0)


def test_compare_metrics(caption_queries, tmp_path):
    write_queries(tmp_path / "set.jsonl", caption_queries[:5])
    runs = []
    for name, metrics in (("a", {"FID": 64.80, "CLIP Score": 26.27, "IS": 16.38}), ("b", {"FID": 64.46, "CLIP Score": 26.08})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({"task": "image", "metrics": metrics}))
        runs.append(tmp_path / name)
    result = compare_sample_runs(tmp_path / "set.jsonl", tmp_path / "set.jsonl", runs[:1], runs[1:])
    d = result["runs"][0]["metrics"]
    assert set(d) == {"FID", "CLIP Score"}
    assert d["FID"]["diff"] == pytest.approx(-0.34)
    assert d["FID"]["rel_diff_pct"] == pytest.approx(-0.34 / 64.80 * 100)


def test_cli_sample_and_compare(tmp_path, caption_queries):
    src = tmp_path / "captions.jsonl"
    write_queries(src, caption_queries)
    runner = CliRunner()
    for seed in (1, 2):
        res = runner.invoke(cli, ["report", "sampling", "sample", "--queries", str(src), "--seed", str(seed),
                                  "--out", str(tmp_path / f"set{seed}.jsonl")])
        assert res.exit_code == 0, res.output
        assert "sampled 51 caption(s)" in res.output
    set1 = read_queries(tmp_path / "set1.jsonl")
    assert [q.qid for q in set1] == [q.qid for q in sample_one_per_image(caption_queries, 1)]
    runs = []
    for name, fid in (("a", 24.14), ("b", 24.22)):
        d = tmp_path / f"run_{name}"
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"task": "image", "generator": "lavit", "mode": "rag", "k": 5}))
        (d / "metrics.json").write_text(json.dumps({"task": "image", "metrics": {"FID": fid}}))
        runs.append(d)
    res = runner.invoke(cli, ["report", "sampling", "compare", str(tmp_path / "set1.jsonl"), str(tmp_path / "set2.jsonl"),
                              "--run-a", str(runs[0]), "--run-b", str(runs[1]), "--out", str(tmp_path / "cmp.json")])
    assert res.exit_code == 0, res.output
    saved = json.loads((tmp_path / "cmp.json").read_text())
    assert saved["overlap"]["n_a"] == 51 and saved["runs"][0]["metrics"]["FID"]["diff"] == pytest.approx(0.08)
    assert "k=5" in res.output
    res = runner.invoke(cli, ["report", "sampling", "compare", str(tmp_path / "set1.jsonl"), str(tmp_path / "set2.jsonl"),
                              "--run-a", str(runs[0])])
    assert res.exit_code != 0 and "pair up" in str(res.exception)
