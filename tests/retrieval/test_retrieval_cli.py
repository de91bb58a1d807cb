"""`unirag index build|info`, `unirag retrieve`, `unirag evaluate retrieval` end to end on real COCO mini."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import unirag.encoders.registry as registry
from index.helpers import HashEncoder
from unirag.cli.main import main
from unirag.retrieval.run_io import read_retrieval_run


@pytest.fixture
def oracle_registry(monkeypatch, coco_oracle_encoder):
    """`--encoder` names resolve to the COCO oracle test encoder ("other" to a different one)."""
    def fake_load(spec=None, **kwargs):
        return HashEncoder(name="other") if spec == "other" else coco_oracle_encoder

    monkeypatch.setattr(registry, "load_encoder", fake_load)


def _fail(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_build_info_retrieve_evaluate(oracle_registry, coco_mbeir, coco_mini: Path, tmp_path: Path, capsys) -> None:
    idx = tmp_path / "idx"
    main(["index", "build", "--pool", str(coco_mbeir["pool"]), "--images-root", str(coco_mini), "--out", str(idx),
          "--batch-size", "32"])
    out = capsys.readouterr().out
    assert "306 candidates" in out and "text: 255" in out and "image: 51" in out
    main(["index", "info", str(idx)])
    out = capsys.readouterr().out
    assert "test-coco-oracle" in out and "checksums  not checked" in out and "255" in out
    main(["index", "verify", str(idx)])
    assert capsys.readouterr().out.startswith("ok: ")

    run = tmp_path / "i2t.jsonl"
    main(["retrieve", "--index", str(idx), "--queries", str(coco_mbeir["i2t"]), "--images-root", str(coco_mini),
          "--k", "5", "--out", str(run), "--modality", "text"])
    results = read_retrieval_run(run)
    assert len(results) == 51 and all(len(r) == 5 and len(r.pairs) == 5 for r in results.values())
    first = json.loads(run.read_text().splitlines()[0])
    # raw: the ids as retrieved (UniIR Recall@k); near_duplicates: the leakage guard reports by default
    assert set(first) == {"qid", "candidates", "pairs", "raw", "near_duplicates"}
    assert set(first["pairs"][0]) >= {"image_did", "text_did", "img_path", "txt"}
    assert len(run.with_suffix(".trec").read_text().splitlines()) == 51 * 5
    capsys.readouterr()

    metrics_path = tmp_path / "m.json"
    main(["evaluate", "retrieval", "--run", str(run), "--qrels", str(coco_mbeir["qrels_i2t"]), "--k", "1,5",
          "--out", str(metrics_path)])
    table = capsys.readouterr().out
    assert "note:" not in table
    assert "hit@k" in table and "recall@k" in table and "MRR@k" in table
    metrics = json.loads(metrics_path.read_text())["metrics"]
    assert metrics["hit@5"] == 1.0 and metrics["hit@1"] >= 0.8 and metrics["recall@1"] <= 0.2
    assert metrics["num_queries"] == 51
    # every metric's 95 % interval over the 51 queries, in the file and printed (one row per cutoff)
    saved = json.loads(metrics_path.read_text())
    cis = saved["intervals"]
    assert set(cis) == {f"{m}@{k}" for m in ("hit", "recall", "mrr", "uniir_recall") for k in (1, 5)}
    assert all(c["low"] <= metrics[m] <= c["high"] for m, c in cis.items())
    assert cis["hit@5"] == {"low": 1.0, "high": 1.0, "se": 0.0}  # every query hits: no spread
    row = next(line for line in table.splitlines() if line.startswith("   1  ["))
    assert row.count("[") == 4 and f"{cis['recall@1']['low']:.4f}" in row
    assert saved["bootstrap"]["n_resamples"] == 1000

    clean = tmp_path / "i2t_clean.jsonl"
    main(["retrieve", "--index", str(idx), "--queries", str(coco_mbeir["i2t"]), "--images-root", str(coco_mini),
          "--k", "5", "--out", str(clean), "--modality", "text", "--exclude-positives", str(coco_mbeir["qrels_i2t"])])
    capsys.readouterr()
    main(["evaluate", "retrieval", "--run", str(clean), "--qrels", str(coco_mbeir["qrels_i2t"])])
    assert "at most 5 candidates per query" in capsys.readouterr().out  # @10 asked of a k=5 run
    assert json.loads(clean.with_name("i2t_clean.metrics.json").read_text())["metrics"]["hit@10"] == 0.0

    err = _fail(["retrieve", "--index", str(idx), "--queries", str(coco_mbeir["t2i"]), "--k", "5",
                 "--out", str(tmp_path / "x.jsonl"), "--encoder", "other"], capsys)
    assert "test-coco-oracle" in err and "'other'" in err


def test_cli_bad_inputs(oracle_registry, coco_mbeir, coco_index: Path, tmp_path: Path, capsys) -> None:
    base = ["retrieve", "--index", str(coco_index), "--queries", str(coco_mbeir["t2i"]), "--out",
            str(tmp_path / "r.jsonl")]
    assert "k must be a positive integer, got 0" in _fail(base + ["--k", "0"], capsys)
    assert "unknown modality 'video'" in _fail(base + ["--modality", "video"], capsys)
    err = _fail(["retrieve", "--index", str(tmp_path / "none"), "--queries", str(coco_mbeir["t2i"]),
                 "--out", str(tmp_path / "r.jsonl")], capsys)
    assert "index directory not found" in err
    assert "file not found" in _fail(base[:3] + ["--queries", str(tmp_path / "q.jsonl"), "--out", "r.jsonl"], capsys)
    assert not (tmp_path / "r.jsonl").exists()
    corrupt = tmp_path / "corrupt_index"
    shutil.copytree(coco_index, corrupt)
    meta = next(corrupt.glob("data-*/meta.sqlite"))
    data = bytearray(meta.read_bytes())
    data[-100] ^= 0xFF  # same size: only a re-hash can tell
    meta.write_bytes(bytes(data))
    for argv in (["index", "verify", str(corrupt)],
                 ["retrieve", "--index", str(corrupt), "--queries", str(coco_mbeir["t2i"]), "--out",
                  str(tmp_path / "r.jsonl"), "--verify"]):
        err = _fail(argv, capsys)
        assert "meta.sqlite" in err and "checksum mismatch" in err
    meta.write_bytes(bytes(data[:-4096]))
    err = _fail(["retrieve", "--index", str(corrupt), "--queries", str(coco_mbeir["t2i"]), "--out",
                 str(tmp_path / "r.jsonl")], capsys)
    assert "meta.sqlite" in err and "truncated" in err
    err = _fail(["evaluate", "retrieval", "--run", str(tmp_path / "r.jsonl"), "--qrels",
                 str(coco_mbeir["qrels_t2i"])], capsys)
    assert "run file not found" in err
    (tmp_path / "r.jsonl").write_text('{"qid": "t2i:1", "candidates": [], "pairs": []}\n')
    assert "--k expects" in _fail(["evaluate", "retrieval", "--run", str(tmp_path / "r.jsonl"), "--qrels",
                                   str(coco_mbeir["qrels_t2i"]), "--k", "1,x"], capsys)
    assert "Invalid value for '--index-type'" in _fail(["index", "build", "--pool", str(coco_mbeir["pool"]),
                                                        "--out", str(tmp_path / "i"), "--index-type", "lsh"], capsys)
    assert "unknown parameter 'nprobes'" in _fail(["index", "build", "--pool", str(coco_mbeir["pool"]), "--out",
                                                   str(tmp_path / "i"), "--index-type", "ivfpq", "--param",
                                                   "nprobes=4"], capsys)
