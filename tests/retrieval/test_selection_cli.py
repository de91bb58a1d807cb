"""Selection options on the command line: `unirag retrieve` (run file + manifest), `unirag caption`
with an index (manifest + per-query leak counts) and `unirag report` (leak rate next to metrics)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import unirag.encoders.registry as registry
from unirag.cli.main import main
from unirag.retrieval.run_io import read_retrieval_run, read_run_manifest


@pytest.fixture
def oracle_registry(monkeypatch, coco_oracle_encoder):
    monkeypatch.setattr(registry, "load_encoder", lambda spec=None, **kwargs: coco_oracle_encoder)


def _fail(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_retrieve_with_selection_options(oracle_registry, coco_index, coco_mbeir, coco_mini, tmp_path, capsys):
    pool = [json.loads(line) for line in coco_mbeir["pool"].read_text().splitlines()]
    sources = sorted({json.loads(c["src_content"])["source_id"] for c in pool})[:12]
    run = tmp_path / "i2t.jsonl"
    main(["retrieve", "--index", str(coco_index), "--queries", str(coco_mbeir["i2t"]), "--images-root",
          str(coco_mini), "--k", "5", "--modality", "text", "--exclude-positives", str(coco_mbeir["qrels_i2t"]),
          "--set", "one_per_image=on", "--set", "near_duplicates=exclude", "--set", "filter=source_id=" + ",".join(sources),
          "--out", str(run)])
    capsys.readouterr()
    results = read_retrieval_run(run)
    assert len(results) == 51
    for r in results.values():
        assert len({p.image_did for p in r.pairs}) == len(r.pairs) == 5
        assert all(c.did.split(":")[1] in sources for c in r)  # txt:<source id>:<j>
        assert r.near_duplicates is not None and r.near_duplicates["excluded"] == r.near_duplicates["flagged"]
    manifest = read_run_manifest(run)
    assert manifest["selection"]["one_per_image"] is True
    assert manifest["selection"]["near_duplicates"] == "exclude"
    assert manifest["selection"]["where"] == {"source_id": sources}
    assert manifest["near_duplicates"]["leak_rate"] == 0.0


@pytest.mark.parametrize("args,message", [(["--set", "filter=dataset"], "FIELD=VALUE"),
                                          (["--set", "mmr_lambda=3"], "mmr lambda"),
                                          (["--set", "hash_threshold=99"], "0..64")])
def test_bad_selection_options_exit_2_with_one_line(oracle_registry, coco_index, coco_mbeir, tmp_path, capsys,
                                                    args, message):
    err = _fail(["retrieve", "--index", str(coco_index), "--queries", str(coco_mbeir["i2t"]), "--out",
                 str(tmp_path / "r.jsonl"), *args], capsys)
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_caption_run_records_selection_and_report_shows_leak_rate(oracle_registry, coco_index, coco_mbeir,
                                                                  coco_mini, tmp_path, capsys):
    runs = {}
    for name, extra in (("plain", []), ("guarded", ["--set", "near_duplicates=exclude", "--set", "one_per_image=on"])):
        out = tmp_path / name
        main(["caption", "--queries", str(coco_mbeir["i2t"]), "--images-root", str(coco_mini), "--generator",
              "retrieval:consensus", "--option", "similarity=lexical", "--mode", "rag", "--k", "3", "--index",
              str(coco_index), "--out", str(out), "--no-progress", *extra])
        main(["evaluate", "captions", "--run", str(out), "--queries", str(coco_mbeir["i2t"]), "--pool",
              str(coco_mbeir["pool"])])
        runs[name] = out
    capsys.readouterr()
    manifest = json.loads((runs["guarded"] / "manifest.json").read_text())
    assert manifest["identity"]["examples"]["selection"]["near_duplicates"] == "exclude"
    assert manifest["identity"]["examples"]["selection"]["one_per_image"] is True
    records = [json.loads(line) for line in (runs["guarded"] / "outputs.jsonl").read_text().splitlines()]
    assert all("near_duplicates" in r and not any("near_duplicate" in e for e in r["examples"]) for r in records)
    plain = [json.loads(line) for line in (runs["plain"] / "outputs.jsonl").read_text().splitlines()]
    # no positives excluded: the query's own captions come back, completed with another image, and are flagged
    assert sum(any(e.get("near_duplicate") for e in r["examples"]) for r in plain) > len(plain) / 2

    main(["report", str(runs["plain"]), str(runs["guarded"]), "--out", str(tmp_path / "report")])
    table = (tmp_path / "report" / "tables.md").read_text()
    assert "Leak rate" in table
    rows = [line for line in table.splitlines() if line.startswith("|") and "CIDEr" not in line and "---" not in line]
    leak = sorted(line.rstrip(" |").rsplit("|", 1)[1].strip() for line in rows)
    assert leak[0] == "0.0%" and float(leak[1].rstrip("%")) > 50


def test_selection_options_with_a_run_file_are_refused(oracle_registry, coco_index, coco_mbeir, coco_mini,
                                                       tmp_path, capsys):
    run = tmp_path / "r.jsonl"
    main(["retrieve", "--index", str(coco_index), "--queries", str(coco_mbeir["i2t"]), "--images-root",
          str(coco_mini), "--k", "3", "--modality", "text", "--out", str(run)])
    capsys.readouterr()
    err = _fail(["caption", "--queries", str(coco_mbeir["i2t"]), "--images-root", str(coco_mini), "--generator",
                 "retrieval:top1", "--mode", "rag", "--k", "1", "--retrieval", str(run), "--set", "one_per_image=on",
                 "--out", str(tmp_path / "c")], capsys)
    assert "unirag retrieve" in err
    assert Path(run).with_name("r.manifest.json").is_file()
