"""Paper Table 7 in ``unirag report``: one pipeline on two caption sample sets, rows by set then k.

The sample sets are drawn from the real COCO mini captions with ``unirag report sampling sample``,
exactly as a user makes them; the runs carry the paper's Table 7 numbers as their metrics.json
(layout test: the numbers must come out in the right cells, not be recomputed).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from eval_run_factory import coco_rows

from unirag.cli.main import cli
from unirag.data.mbeir import read_queries, write_queries
from unirag.data.records import Modality, Query
from unirag.reports.build import build_report

# Table 7: (FID, CLIP Score, IS, IS SD) per sample set and k
TABLE7 = {
    1: {0: (64.80, 26.27, 16.38, 1.27), 1: (23.39, 30.42, 24.11, 1.09), 5: (24.14, 31.09, 24.52, 1.08)},
    2: {0: (64.46, 26.08, 15.83, 0.86), 1: (23.24, 30.38, 24.78, 1.97), 5: (24.22, 31.03, 24.58, 0.75)},
}
LAVIT = "diffusers:lavit"


def _caption_queries(rows: list[dict]) -> list[Query]:
    """Every caption of every image as a text->image query (the 25k-caption source of the paper)."""
    return [Query(qid=f"t:{r['image_id']}-{j}", modality=Modality.TEXT, txt=c,
                  pos_cand_list=[f"9:{r['image_id']}-img"], task_id=0)
            for r in rows for j, c in enumerate(r["captions"])]


def _run(root: Path, name: str, queries: Path, mode: str, k: int, metrics: tuple[float, ...]) -> Path:
    """A run directory as ``unirag generate-images`` + ``unirag evaluate images`` leave it (metrics only)."""
    d = root / name
    d.mkdir()
    identity = {"queries": str(queries.resolve()), "generator": LAVIT, "mode": mode, "k": k,
                **({"retriever": "CLIP-SF"} if mode == "rag" else {})}
    (d / "manifest.json").write_text(json.dumps({"task": "image", "identity": identity}))
    fid, clip, is_, sd = metrics
    (d / "metrics.json").write_text(json.dumps({"task": "image", "n_scored": 6, "n_failed": 0,
                                                "metrics": {"FID": fid, "CLIP Score": clip, "IS": is_, "IS SD": sd}}))
    return d


@pytest.fixture(scope="module")
def sampled(tmp_path_factory, coco_mini):
    tmp = tmp_path_factory.mktemp("sampling_report")
    rows = coco_rows(coco_mini, 10)
    source = tmp / "coco_captions.jsonl"
    write_queries(source, _caption_queries(rows[:6]))
    other = tmp / "other_images.jsonl"  # a sample of different images: another dataset, never merged
    write_queries(other, [q for q in _caption_queries(rows[6:]) if q.qid.endswith("-0")])
    runner = CliRunner()
    sets = {}
    for seed in (2, 1):
        sets[seed] = tmp / f"coco_seed{seed}.jsonl"
        res = runner.invoke(cli, ["report", "sampling", "sample", "--queries", str(source), "--seed", str(seed),
                                  "--out", str(sets[seed])])
        assert res.exit_code == 0, res.output
    runs = []
    for seed, by_k in TABLE7.items():
        for k, values in by_k.items():
            runs.append(_run(tmp, f"set{seed}-k{k}", sets[seed], "zero-shot" if k == 0 else "rag", k, values))
    distractors = [
        _run(tmp, "source-k1", source, "rag", 1, (30.0, 29.0, 20.0, 1.0)),  # 5 captions per image: not a sample
        _run(tmp, "other-k1", other, "rag", 1, (40.0, 28.0, 21.0, 1.0)),
        _run(tmp, "random-set1-k1", sets[1], "random", 1, (50.0, 27.0, 22.0, 1.0)),  # only on one set
    ]
    out = tmp / "report"
    order = [runs[4], distractors[0], runs[0], runs[5], distractors[2], runs[2], runs[1], distractors[1], runs[3]]
    res = runner.invoke(cli, ["report", *map(str, order), "--out", str(out), "--no-gallery", "--no-plots"])
    assert res.exit_code == 0, res.output
    return {"out": out, "output": res.output, "sets": sets}


def test_one_combined_table_rows_by_set_then_k(sampled):
    tables = sorted((sampled["out"] / "tables").glob("image_sampling_*.csv"))
    assert [p.name for p in tables] == ["image_sampling_CLIP-SF_lavit.csv"]
    with tables[0].open(newline="") as f:
        reader = csv.DictReader(f)
        table = list(reader)
    assert reader.fieldnames[:2] == ["sample_set", "queries"]
    assert [c for c in reader.fieldnames if c in ("FID", "CLIP Score", "IS", "IS SD")] == \
        ["FID", "CLIP Score", "IS", "IS SD"]
    got = [(r["sample_set"], r["queries"], int(r["k"]), r["run"]) for r in table]
    assert got == [("Caption Set 1", "coco_seed1.jsonl", 0, "set1-k0"), ("Caption Set 1", "coco_seed1.jsonl", 1, "set1-k1"),
                   ("Caption Set 1", "coco_seed1.jsonl", 5, "set1-k5"), ("Caption Set 2", "coco_seed2.jsonl", 0, "set2-k0"),
                   ("Caption Set 2", "coco_seed2.jsonl", 1, "set2-k1"), ("Caption Set 2", "coco_seed2.jsonl", 5, "set2-k5")]
    for r in table:
        expected = TABLE7[int(r["sample_set"][-1])][int(r["k"])]
        assert [float(r[c]) for c in ("FID", "CLIP Score", "IS", "IS SD")] == pytest.approx(expected)


def test_markdown_in_paper_layout_with_overlap_legend(sampled):
    md = next((sampled["out"] / "tables").glob("image_sampling_*.md")).read_text(encoding="utf-8")
    lines = md.splitlines()
    assert lines[0] == "### Image generation — CLIP-SF + lavit on 2 caption sample sets"
    assert lines[2] == "| | k | FID ↓ | CLIP Score ↑ | IS ↑ (SD) |"
    body = [[c.strip() for c in line.split("|")[1:-1]] for line in lines[4:10]]
    assert [(b[0], b[1]) for b in body] == [("Caption Set 1", "0"), ("", "1"), ("", "5"),
                                            ("Caption Set 2", "0"), ("", "1"), ("", "5")]
    assert body[0][2:] == ["64.80", "26.27", "16.38 (1.27)"] and body[4][2:] == ["23.24", "30.38", "24.78 (1.97)"]
    q1, q2 = ({q.qid for q in read_queries(sampled["sets"][s])} for s in (1, 2))
    assert f"Caption Set 2: coco_seed2.jsonl (6 captions, {len(q1 & q2)} in common with Caption Set 1)" in md
    assert "same 6 images" in md
    assert md in sampled["output"]  # printed by the command, after the per-dataset tables


def test_per_dataset_tables_stay_and_index_links_the_csv(sampled):
    names = {p.name for p in (sampled["out"] / "tables").glob("*.csv")}
    assert {"image_coco_seed1.csv", "image_coco_seed2.csv", "image_coco_captions.csv",
            "image_other_images.csv"} <= names
    index = (sampled["out"] / "index.html").read_text(encoding="utf-8")
    assert "Caption Set 2" in index and 'href="tables/image_sampling_CLIP-SF_lavit.csv"' in index


def test_unreadable_queries_file_keeps_the_run_out_of_the_sampling_table(sampled, tmp_path):
    seed1 = sampled["sets"][1]
    a = _run(tmp_path, "a", seed1, "rag", 1, TABLE7[1][1])
    b = _run(tmp_path, "b", seed1.with_name("gone.jsonl"), "rag", 1, TABLE7[2][1])
    written = build_report([a, b], tmp_path / "out", gallery=False, plots=False)
    assert not [p for p in written["tables"] if p.name.startswith("image_sampling_")]
    assert (tmp_path / "out" / "tables" / "image_gone.csv").is_file()
