"""``--profile`` and ``--set`` on the commands, the manifests that record them, and the report's
paper and Δ columns."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from cli_capture import main_result as _cli
from fake_openai_server import FakeServer
from unirag.cli.main import cli, main
from unirag.reports.build import build_report


@pytest.mark.parametrize("command, options", [
    ("retrieve", []),
    ("caption", ["--official-prompts"]),
    ("generate-images", []),
    ("run", ["--dry-run", "--data-root"]),
    ("cir", ["--official-prompts"]),
])
def test_commands_take_a_profile_and_every_setting_by_set(command, options):
    """One --set for every setting: its help names every row of the settings table (none is a flag)."""
    from unirag.profiles import SETTINGS

    text = CliRunner().invoke(cli, [command, "--help"]).output
    assert "--profile [default|official]" in text and "--set NAME=VALUE" in text
    flat = " ".join(text.split())
    for name in SETTINGS:
        assert name in flat, (command, name)
        assert "--" + name.replace("_", "-") + " " not in text, (command, name)
    for option in options:
        assert option in text, (command, option)


def test_a_bad_setting_value_is_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = _cli(["caption", "--queries", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "o"),
                         "--set", "temperature=warm"], capsys)
    assert code == 2 and err.startswith("error: setting 'temperature': cannot read 'warm'") and len(err.splitlines()) == 1


def _caption(coco_set, out, server, *extra):
    main(["caption", "--queries", str(coco_set["queries"]), "--images-root", str(coco_set["images_root"]),
          "--generator", "openai:gpt-4o", "--base-url", server.url, "--mode", "rag", "--k", "1",
          "--retrieval", str(coco_set["run"]), "--limit", "2", "--out", str(out), "--no-progress", *extra])


def test_caption_manifest_records_the_profile_and_official_sends_no_temperature(coco_set, tmp_path, monkeypatch):
    """castorini/UniRAG src/unirag/caption_generation_inference.py at commit 294f843a, infer_gpt: the request
    is ``client.chat.completions.create(model=, messages=, max_tokens=)`` (:174-178), no temperature; the
    default profile sends unirag's 0.0."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-not-secret")
    with FakeServer() as server:
        _caption(coco_set, tmp_path / "default", server)
        sent_default = [r.json for r in server.requests]
        server.requests.clear()
        _caption(coco_set, tmp_path / "official", server, "--profile", "official")
        sent_official = [r.json for r in server.requests]
        server.requests.clear()
        _caption(coco_set, tmp_path / "mixed", server, "--profile", "official", "--set", "temperature=0.5")
        sent_mixed = [r.json for r in server.requests]
    assert [b["temperature"] for b in sent_default] == [0.0, 0.0]
    assert all("temperature" not in b for b in sent_official)
    # nor a seed (issue 27, point 9): --seed / a grid's `seed:` chooses random examples, never sent
    assert all("seed" not in b for b in sent_official + sent_default)
    assert [b["temperature"] for b in sent_mixed] == [0.5, 0.5]
    default = json.loads((tmp_path / "default" / "manifest.json").read_text())
    official = json.loads((tmp_path / "official" / "manifest.json").read_text())
    mixed = json.loads((tmp_path / "mixed" / "manifest.json").read_text())
    assert default["settings"]["profile"]["profile"] == "default"
    assert official["settings"]["profile"]["settings"]["temperature"] is None
    assert official["identity"]["temperature"] is None and default["identity"]["temperature"] == 0.0
    assert mixed["settings"]["profile"]["overrides"] == ["temperature"]
    assert "test-key-not-secret" not in json.dumps(official)


def test_retrieve_records_its_settings_beside_the_run(tmp_path, capsys, coco_index, coco_mbeir, coco_mini,
                                                      coco_oracle_encoder, monkeypatch):
    """The run keeps the raw hit ids UniIR's Recall@k scores (TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py
    at commit 72871c19 :467-480) and ``evaluate retrieval`` reports it beside hit@k, each labelled."""
    import unirag.encoders.registry as registry

    monkeypatch.setattr(registry, "load_encoder", lambda spec=None, **kw: coco_oracle_encoder)
    run = tmp_path / "i2t.jsonl"
    main(["retrieve", "--index", str(coco_index), "--queries", str(coco_mbeir["i2t"]), "--images-root",
          str(coco_mini), "--k", "3", "--out", str(run), "--modality", "text", "--set", "example_pairs=per-hit"])
    manifest = json.loads((tmp_path / "i2t.manifest.json").read_text())
    assert manifest["profile"]["profile"] == "default" and manifest["profile"]["overrides"] == ["example_pairs"]
    assert manifest["profile"]["settings"]["example_pairs"] == "per-hit" and manifest["k"] == 3
    first = json.loads(run.read_text().splitlines()[0])
    assert len(first["raw"]) == 3
    capsys.readouterr()
    main(["evaluate", "retrieval", "--run", str(run), "--qrels", str(coco_mbeir["qrels_i2t"]), "--k", "1,3"])
    out = capsys.readouterr().out
    assert "UniIR R@k" in out and "complement replacement" in out
    metrics = json.loads((tmp_path / "i2t.metrics.json").read_text())
    assert "uniir_recall@1" in metrics["metrics"] and "UniIR" in metrics["labels"]["uniir_recall"]


def test_report_shows_paper_and_delta_next_to_each_measured_figure(tmp_path):
    d = tmp_path / "cell"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"task": "caption", "generator": "retrieval:top1", "mode": "rag",
                                                 "k": 1, "retriever": "CLIP-SF"}))
    (d / "metrics.json").write_text(json.dumps({"task": "caption", "metrics": {"BLEU-1": 80.0, "CIDEr": 200.0}}))
    (d / "paper.json").write_text(json.dumps({"source": "Table 3", "row": "1a", "paper": {"BLEU-1": 88.5}}))
    build_report([d], tmp_path / "out", gallery=False, plots=False)
    md = (tmp_path / "out" / "tables.md").read_text()
    assert "| BLEU-1 | BLEU-1 (paper) | Δ | CIDEr |" in md
    assert "| 80.0 | 88.5 | -8.5 | 200.0 |" in md
    rows = list(csv.DictReader(io.StringIO(next((tmp_path / "out" / "tables").glob("*.csv")).read_text())))
    assert rows[0]["BLEU-1 paper"] == "88.5000" and rows[0]["BLEU-1 Δ"] == "-8.5000"
    html = (tmp_path / "out" / "index.html").read_text()
    assert "BLEU-1 (paper)" in html and "-8.5" in html
