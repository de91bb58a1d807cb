"""``unirag report --baseline``: paired differences, daggers, queries used, unpaired runs refused.

The runs are written by hand (manifest, metrics.json, metrics_per_query.jsonl as ``unirag evaluate
captions`` writes them), so the differences are known: one run clearly better than the baseline,
one identical to it, one on other queries.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli_capture import main_result
from unirag.cli.main import cli
from unirag.errors import InputError
from unirag.reports.collect import summarize_run
from unirag.reports.compare import MARK, compare_runs
from unirag.reports.plots import error_bar

N = 40
LLAVA = "hf:llava-hf/llava-1.5-7b-hf"


def _run(root: Path, name: str, qids: list[str], cider: np.ndarray, rouge: np.ndarray, bleu: np.ndarray,
         **manifest) -> Path:
    d = root / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"task": "caption", "dataset": "coco-mini", "generator": LLAVA,
                                                 **manifest}))
    records = [{"qid": q, "CIDEr": float(c), "ROUGE-L": float(r), "bleu_stats": [float(x) for x in b]}
               for q, c, r, b in zip(qids, cider, rouge, bleu, strict=True)]
    (d / "metrics_per_query.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    metrics = {"CIDEr": float(cider.mean()), "ROUGE-L": float(rouge.mean()), "BLEU-4": 20.0}
    intervals = {"CIDEr": {"low": float(cider.mean()) - 5, "high": float(cider.mean()) + 7, "se": 3.0}}
    (d / "metrics.json").write_text(json.dumps({"task": "caption", "metrics": metrics, "intervals": intervals,
                                                "n_scored": len(qids)}))
    return d


@pytest.fixture
def runs(tmp_path):
    rng = np.random.default_rng(0)
    qids = [f"9:{i}" for i in range(N)]
    cider, rouge = rng.gamma(2.0, 30.0, N), rng.uniform(30, 60, N)
    bleu = np.column_stack([rng.integers(8, 12, N), rng.integers(8, 12, N)]
                           + [rng.integers(4, 9, N) for _ in range(4)] + [rng.integers(0, 4, N) for _ in range(4)])
    return {
        "base": _run(tmp_path, "zs", qids, cider, rouge, bleu, mode="zero-shot", k=0),
        "better": _run(tmp_path, "rag5", qids, cider + 40 + rng.normal(0, 5, N), rouge + rng.normal(0, 5, N),
                       bleu, mode="rag", k=5, retriever="CLIP-SF"),
        "same": _run(tmp_path, "rnd1", qids, cider.copy(), rouge.copy(), bleu.copy(), mode="random", k=1),
        "elsewhere": _run(tmp_path, "other", [f"x:{i}" for i in range(N)], cider, rouge, bleu, mode="rag", k=1,
                          retriever="CLIP-SF"),
    }


def test_compare_runs_marks_a_clear_gain_and_not_an_identical_run(runs):
    comp = compare_runs([runs["base"], runs["better"], runs["same"]], runs["base"], resamples=500)
    by_run = {r.run.name: r for r in comp.rows}
    assert set(by_run) == {"rag5", "rnd1"} and comp.baseline.name == "zs"
    assert comp.metrics == ["BLEU-4", "CIDEr", "ROUGE-L"]
    gain = by_run["rag5"].metrics["CIDEr"]
    assert by_run["rag5"].n == N and gain.n == N
    assert gain.significant and 35 < gain.low < gain.diff < gain.high < 45
    assert gain.p_holm >= gain.p_value
    same = by_run["rnd1"].metrics["CIDEr"]
    assert (same.diff, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0) and not same.significant
    # identical BLEU counts in all three runs: no BLEU difference anywhere
    assert all(r.metrics["BLEU-4"].diff == 0 and r.metrics["BLEU-4"].p_value == 1 for r in comp.rows)
    assert comp.settings["n_tests"] == 6


def test_report_baseline_by_row_name_marks_cells_and_says_how_many_queries(runs, tmp_path):
    out = tmp_path / "report"
    res = CliRunner().invoke(cli, ["report", str(runs["better"]), str(runs["same"]), str(runs["base"]),
                                   "--baseline", "zs", "--out", str(out), "--no-gallery", "--resamples", "500"])
    assert res.exit_code == 0, res.output
    md = (out / "tables" / "compare_caption_coco-mini.md").read_text(encoding="utf-8")
    assert md in (out / "tables.md").read_text(encoding="utf-8") and "Differences from the baseline" in res.output
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines()
            if line.startswith("| ") and ("CLIP-SF" in line or "Random" in line)}
    k, n, bleu, cider, rouge = rows["CLIP-SF + llava-1.5-7b-hf"]
    assert (k, n) == ("5", str(N)) and cider.startswith("+") and MARK in cider
    assert MARK not in rows["Random + llava-1.5-7b-hf"][3] and "(no difference)" in rows["Random + llava-1.5-7b-hf"][3]
    assert "Holm" in md and "n" in md.splitlines()[2]
    with (out / "tables" / "compare_caption_coco-mini.csv").open() as f:
        table = list(csv.DictReader(f))
    assert {(r["run"], r["metric"], r["significant"]) for r in table} >= {("rag5", "CIDEr", "1"), ("rnd1", "CIDEr", "0")}
    assert all(r["n"] == str(N) for r in table)
    assert "Differences from the baseline" in (out / "index.html").read_text(encoding="utf-8")


def test_unpaired_runs_are_refused_with_one_line(runs, tmp_path, capsys):
    with pytest.raises(InputError, match="share no scored query"):
        compare_runs([runs["base"], runs["elsewhere"]], runs["base"])
    code, out, err = main_result(["report", str(runs["base"]), str(runs["elsewhere"]), "--baseline",
                                  str(runs["base"]), "--out", str(tmp_path / "r"), "--no-gallery"], capsys)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "unpaired" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # refused before anything is written


def test_unknown_baseline_says_which_rows_exist(runs, tmp_path):
    with pytest.raises(InputError, match="neither a run folder nor a row"):
        compare_runs([runs["base"], runs["better"]], "nope")


def test_plot_error_bars_come_from_the_intervals(runs):
    summaries = [summarize_run(runs["base"]), summarize_run(runs["better"])]
    low, high = error_bar(summaries, "CIDEr")
    assert low == pytest.approx([5, 5]) and high == pytest.approx([7, 7])
    assert error_bar(summaries, "ROUGE-L") is None  # no interval recorded: plain points
