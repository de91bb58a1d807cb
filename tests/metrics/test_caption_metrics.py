"""Caption metrics against numbers obtained by running pycocoevalcap by hand (see the fixture README).

Java is slow to start (METEOR loads its paraphrase tables), so the expensive scoring runs once:
``cli_run`` scores a run directory holding the committed fixture's captions (wrapped in answer
prefixes, plus failed queries) through ``unirag evaluate captions`` -> ``evaluate_caption_run`` ->
``caption_metrics``; the tests compare its metrics.json and per-query file with the hand-run numbers.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from eval_run_factory import coco_rows, write_caption_task, write_run

from unirag.cli.main import cli
from unirag.errors import ConfigError, InputError
from unirag.metrics import spice
from unirag.metrics.captions import caption_metrics, evaluate_caption_run

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "caption_metrics"
N_FAILED = 3


@pytest.fixture(scope="module")
def fixture_data():
    return json.loads((FIXTURE / "fixture.json").read_text()), json.loads((FIXTURE / "expected.json").read_text())


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, coco_mini, fixture_data):
    """A caption run over the fixture's 40 images + 3 failed ones; captions wrapped in answer prefixes."""
    fx, _ = fixture_data
    tmp = tmp_path_factory.mktemp("capeval")
    # the fixture's 40 images (candidate = first caption, references = the other four), then N_FAILED
    # real COCO images outside it whose queries fail
    rows = [{"image_id": int(i), "image": fx["images"][i], "captions": [fx["candidates"][i], *fx["references"][i]]}
            for i in fx["candidates"]]
    rows += [r for r in coco_rows(coco_mini, 51) if str(r["image_id"]) not in fx["candidates"]][:N_FAILED]
    assert len(rows) == 40 + N_FAILED
    queries, pool = write_caption_task(tmp, rows)
    records = []
    for j, r in enumerate(rows[:40]):
        cap = r["captions"][0]
        records.append({"qid": f"9:{r['image_id']}",
                        "caption": [f"Caption [{j % 5 + 2}]: {cap}", f'"{cap}"', cap][j % 3]})
    for r in rows[40:]:
        records.append({"qid": f"9:{r['image_id']}", "status": "error", "error": "HTTP 500", "caption": None})
    # a query retried after a failure: the later line (ok) wins
    records.insert(0, {"qid": f"9:{rows[0]['image_id']}", "status": "error", "error": "timeout"})
    run = write_run(tmp / "run", records, {"task": "caption", "generator": "openai:gpt-4o", "mode": "rag", "k": 1})
    result = CliRunner().invoke(cli, ["evaluate", "captions", "--run", str(run), "--queries", str(queries),
                                      "--pool", str(pool)], env={"UNIRAG_SPICE_LIB": ""})
    return run, result


def test_corpus_metrics_match_hand_run_pycocoevalcap(cli_run, fixture_data):
    """Prefixes stripped and failures excluded, the run scores exactly like the bare fixture by hand
    (pycocoevalcap 1.2 ``eval.py`` lines 32-45: PTB tokenization, then Bleu(4), Meteor, Rouge, Cider; UniRAG
    strips only a leading ``Caption [n]: ``, castorini/UniRAG ``src/unirag/eval_caption_generation.py`` at
    commit 0a6e6a36 lines 59-65, where unirag strips that and other answer prefixes)."""
    _, expected = fixture_data
    run, result = cli_run
    assert result.exit_code == 0, result.output
    metrics = json.loads((run / "metrics.json").read_text())
    assert list(metrics["metrics"]) == ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr"]
    for name, raw in expected["raw"].items():
        assert metrics["metrics"][name] == pytest.approx(100 * raw, abs=1e-9), name
    # sanity of the fixture itself: a human caption against four others (COCO human agreement range)
    assert 80 < metrics["metrics"]["CIDEr"] < 110
    assert metrics["n_scored"] == 40 and metrics["n_failed"] == N_FAILED and metrics["n_missing"] == 0
    assert metrics["n_prefix_stripped"] == 27  # 14 'Caption [n]:' + 13 quoted, of 40
    assert "CIDEr" in result.output and "3 failed (excluded)" in result.output


@pytest.mark.slow  # a second METEOR start (about 10 s of CPU) after the kill
def test_a_reused_meteor_process_scores_like_a_fresh_one(cli_run, fixture_data):
    """One METEOR process serves every evaluation of a Python process (its start costs ~10 s of CPU):
    after scoring other captions, and after the process died, METEOR still equals the hand-run value."""
    import unirag.metrics.captions as captions

    fx, expected = fixture_data
    ids = list(fx["candidates"])
    cands = {i: fx["candidates"][i] for i in ids}
    refs = {i: fx["references"][i] for i in ids}
    assert cli_run[1].exit_code == 0  # the fixture's run scored first, in this process
    first = captions._METEOR[0]
    other = caption_metrics({"x": "a dog on a red sofa"}, {"x": ["a cat on a sofa"]})
    assert captions._METEOR[0] is first  # the same process, not a new one
    assert 0 < other["METEOR"] < 100
    assert caption_metrics(cands, refs, strip_prefixes=False)["METEOR"] == pytest.approx(
        100 * expected["raw"]["METEOR"], abs=1e-9)
    first.meteor_p.kill()
    first.meteor_p.wait()
    again = caption_metrics(cands, refs, strip_prefixes=False)
    assert captions._METEOR[0] is not first
    assert again["METEOR"] == pytest.approx(100 * expected["raw"]["METEOR"], abs=1e-9)


def test_per_query_scores_match_hand_run(cli_run, fixture_data):
    _, expected = fixture_data
    run, _ = cli_run
    per_query = {json.loads(x)["qid"]: json.loads(x) for x in (run / "metrics_per_query.jsonl").read_text().splitlines()}
    assert len(per_query) == 40
    ids = [f"9:{i}" for i in expected["ids"]]
    assert [per_query[i]["CIDEr"] for i in ids] == pytest.approx([100 * x for x in expected["per_item_cider"]])
    assert [per_query[i]["BLEU-4"] for i in ids] == pytest.approx([100 * x for x in expected["per_item_bleu4"]])
    first = per_query[ids[0]]
    assert not first["caption_scored"].startswith(("Caption", '"'))
    assert first["tokenized"] == first["tokenized"].lower()  # PTB tokenizer lower-cases


def test_every_metric_is_printed_with_its_interval(cli_run):
    """``evaluate captions`` on the bundled sample: each metric's 95 % interval, printed and in metrics.json;
    BLEU's per-query n-gram counts rebuild the corpus BLEU exactly (what its resamples recompute)."""
    import numpy as np

    from unirag.metrics.stats import corpus_bleu

    run, result = cli_run
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["intervals"]) == set(metrics["metrics"])
    assert metrics["bootstrap"] == {"unit": "query", "method": "percentile", "n_resamples": 1000, "seed": 0,
                                    "confidence": 0.95}
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.split()}
    for name, value in metrics["metrics"].items():
        ci = metrics["intervals"][name]
        assert ci["low"] < value < ci["high"], name
        assert f"[{ci['low']:.2f}, {ci['high']:.2f}]" in lines[name]
    rows = np.array([json.loads(x)["bleu_stats"] for x in (run / "metrics_per_query.jsonl").read_text().splitlines()])
    for n in range(1, 5):
        assert float(corpus_bleu(rows, n)) == pytest.approx(metrics["metrics"][f"BLEU-{n}"], rel=1e-9)


def test_spice_skipped_with_one_line_when_jars_missing(cli_run):
    run, result = cli_run
    msg = json.loads((run / "metrics.json").read_text())["skipped_metrics"]["SPICE"]
    assert "\n" not in msg and "--spice-lib" in msg and spice.SPICE_LIB_ENV in msg
    assert result.output.count("SPICE skipped") == 1


# ---- bad input (no Java needed: errors are raised before scoring) ----

@pytest.fixture()
def small_task(tmp_path, coco_mini):
    rows = coco_rows(coco_mini, 3)
    queries, pool = write_caption_task(tmp_path, rows)
    return tmp_path, rows, queries, pool


def test_missing_run_dir_is_a_clear_error(small_task):
    tmp, _, queries, pool = small_task
    with pytest.raises(InputError, match="run directory not found"):
        evaluate_caption_run(tmp / "nope", queries, pool)
    with pytest.raises(InputError, match="run directory not found"):  # a file is not a run directory
        evaluate_caption_run(queries, queries, pool)


def test_unknown_qid_names_the_queries_file(small_task):
    tmp, rows, queries, pool = small_task
    run = write_run(tmp / "r", [{"qid": "9:404", "caption": "x"}], {"task": "caption"})
    with pytest.raises(InputError, match="not in the queries file") as e:
        evaluate_caption_run(run, queries, pool)
    assert "queries_i2t.jsonl" in str(e.value)


def test_ok_record_without_caption_names_line_and_field(small_task):
    tmp, rows, queries, pool = small_task
    run = write_run(tmp / "r", [{"qid": f"9:{rows[0]['image_id']}", "caption": "a cat"},
                                {"qid": f"9:{rows[1]['image_id']}", "caption": None}], {"task": "caption"})
    with pytest.raises(InputError) as e:
        evaluate_caption_run(run, queries, pool)
    assert "outputs.jsonl:2" in str(e.value) and "caption" in str(e.value)


def test_all_failed_is_an_error_not_a_zero_score(small_task):
    tmp, rows, queries, pool = small_task
    run = write_run(tmp / "r", [{"qid": f"9:{r['image_id']}", "status": "error", "error": "401"} for r in rows],
                    {"task": "caption"})
    with pytest.raises(InputError, match="3 failed"):
        evaluate_caption_run(run, queries, pool)
    assert not (run / "metrics.json").exists()


def test_image_run_is_refused(small_task):
    tmp, rows, queries, pool = small_task
    run = write_run(tmp / "r", [{"qid": f"9:{rows[0]['image_id']}", "image": "a.png"}], {"task": "image"})
    with pytest.raises(InputError, match="evaluate images"):
        evaluate_caption_run(run, queries, pool)


def test_malformed_outputs_line(small_task):
    tmp, rows, queries, pool = small_task
    run = write_run(tmp / "r", [{"qid": f"9:{rows[0]['image_id']}", "caption": "a"}], {"task": "caption"})
    with (run / "outputs.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(InputError, match="outputs.jsonl:2"):
        evaluate_caption_run(run, queries, pool)


def test_caption_metrics_rejects_mismatched_ids():
    with pytest.raises(ConfigError, match=r"same ids \(missing predictions: \['b'\], without references: \['a'\]\)"):
        caption_metrics({"a": "x"}, {"b": ["y"]})
    with pytest.raises(ConfigError, match="no reference"):
        caption_metrics({"a": "x"}, {"a": []})


def test_missing_java_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="need Java"):
        caption_metrics({"a": "a dog"}, {"a": ["a dog runs"]})


# ---- SPICE detection and the SPICE runner (fake java: no CoreNLP here) ----

def _fake_jars(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for jar in spice.CORENLP_JARS:
        (d / jar).write_bytes(b"PK")
    return d


def test_find_corenlp_order(tmp_path, monkeypatch):
    monkeypatch.delenv(spice.SPICE_LIB_ENV, raising=False)
    assert spice.find_corenlp(tmp_path / "empty") is None
    env_dir = _fake_jars(tmp_path / "env")
    monkeypatch.setenv(spice.SPICE_LIB_ENV, str(env_dir))
    assert spice.find_corenlp(None) == env_dir
    opt_dir = _fake_jars(tmp_path / "opt")
    assert spice.find_corenlp(opt_dir) == opt_dir
    (opt_dir / spice.CORENLP_JARS[1]).unlink()  # models jar missing: that directory does not count
    assert spice.find_corenlp(opt_dir) == env_dir


def test_spice_command_puts_corenlp_on_the_classpath(tmp_path):
    """run_spice's Java command line, as a stand-in 'java' receives it."""
    fake, seen = tmp_path / "java", tmp_path / "argv.json"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv, open({str(seen)!r}, 'w'))\n"
                    "json.dump([], open(sys.argv[sys.argv.index('-out') + 1], 'w'))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    spice.run_spice({"a": ["a dog"]}, {"a": ["a dog"]}, tmp_path / "jars", java=str(fake))
    cmd = json.loads(seen.read_text())
    cp = cmd[cmd.index("-cp") + 1].split(os.pathsep)
    assert cp[0].endswith("spice-1.0.jar") and cp[-1] == str((tmp_path / "jars").resolve() / "*")
    assert cmd[cmd.index("-cp") + 2] == "edu.anu.spice.SpiceScorer" and "-subset" in cmd


def test_run_spice_reads_the_scorer_output(tmp_path):
    """A stand-in 'java' writes SPICE's output format; run_spice averages All.f like pycocoevalcap: each
    item's ``float_convert(item['scores']['All']['f'])`` (a non-number becomes NaN) and ``np.mean`` of them,
    so one NaN makes the mean NaN (tylin/coco-caption ``pycocoevalcap/spice/spice.py`` at commit 1336670a,
    lines 23-27 and 85-86; the pycocoevalcap 1.2 package unirag's fixture was made with: lines 26-30, 88-89)."""
    fake = tmp_path / "java"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "a = sys.argv; inp = json.load(open(a[a.index('edu.anu.spice.SpiceScorer') + 1]))\n"
        "out = a[a.index('-out') + 1]\n"
        "res = [{'image_id': x['image_id'], 'scores': {'All': {'f': 0.5 if x['test'] == x['refs'][0] else 'NaN',"
        " 'pr': 0.5, 're': 0.5}}} for x in inp]\n"
        "json.dump(res, open(out, 'w'))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    mean, items = spice.run_spice({"a": ["a dog"], "b": ["a cat"]}, {"a": ["a dog"], "b": ["a cow"]},
                                  tmp_path, java=str(fake))
    assert items[0] == 0.5 and items[1] != items[1]  # NaN kept, as pycocoevalcap's float_convert does
    assert mean != mean  # and np.mean of a list holding a NaN is NaN
    mean2, _ = spice.run_spice({"a": ["a dog"]}, {"a": ["a dog"]}, tmp_path, java=str(fake))
    assert mean2 == 0.5


def test_spice_failure_keeps_the_other_metrics(monkeypatch, tmp_path):
    """A SPICE crash (e.g. out of memory) becomes one skipped line; no METEOR here, to stay fast."""
    from unirag.metrics import captions

    def crash(*a, **k):
        raise RuntimeError("SPICE failed (exit 1): java.lang.OutOfMemoryError")

    monkeypatch.setattr(captions, "find_corenlp", lambda lib: tmp_path)
    monkeypatch.setattr(captions, "run_spice", crash)
    out = captions.caption_metrics({"a": "A dog runs on grass."}, {"a": ["a dog running on the grass", "a dog"]},
                                   meteor=False, spice=True, per_item=True)
    assert out["corpus"]["BLEU-1"] > 0 and "OutOfMemoryError" in out["skipped"]["SPICE"]


def test_run_spice_failure_is_reported(tmp_path):
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'Error: could not find CoreNLP' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="SPICE failed.*could not find CoreNLP"):
        spice.run_spice({"a": ["x"]}, {"a": ["y"]}, tmp_path, java=str(fake))
