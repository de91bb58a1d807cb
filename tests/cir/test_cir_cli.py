"""``unirag cir`` on real product photos (Myntra) offline, and its errors."""

from __future__ import annotations

import json

import pytest
from myntra_cir import build_colour_cir, build_fashioniq_format

from tiny_models import tiny_clip_dir
from unirag.cli.main import main


def _cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_offline_run_says_so_and_writes_baseline(myntra, tmp_path, capsys):
    q, pool = build_colour_cir(myntra / "products.jsonl", tmp_path / "set", n_queries=6, seed=1, pool_size=80)
    try:
        main(["cir", "--dataset", "mbeir", "--annotations", str(q), "--split-file", str(pool), "--images-root",
              str(myntra), "--out", str(tmp_path / "run"), "--encoder", str(tiny_clip_dir()), "--quiet"])
    except SystemExit as e:
        assert e.code in (0, None)
    out = capsys.readouterr()
    lines = [x for x in out.err.splitlines() if "no agent models configured" in x]
    assert len(lines) == 1 and "embedding baseline" in lines[0]
    metrics = json.loads((tmp_path / "run/metrics.json").read_text())
    assert set(metrics) >= {"baseline", "dataset"} and "xr" not in metrics and "xr_coarse" not in metrics
    assert metrics["baseline"]["n_queries"] == 6 and 0 <= metrics["baseline"]["R@50"] <= 100
    rows = [json.loads(x) for x in (tmp_path / "run/rankings.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(len(r["ranked"]) == 50 and r["final_stage"] == "baseline" for r in rows)
    assert "imagination" not in rows[0] and "scores" not in rows[0]  # no agent pretended to run
    assert "baseline" in out.out
    # every printed metric has its 95 % bootstrap interval over the 6 queries, also in metrics.json
    base = metrics["baseline"]
    figures = {k for k, v in base.items() if isinstance(v, float)}
    assert figures == set(base["intervals"]) and figures >= {"R@1", "R@5", "R@10", "R@50"}
    assert all(c["low"] <= base[m] <= c["high"] for m, c in base["intervals"].items())
    ci_line = next(x for x in out.out.splitlines() if "95% CI" in x)
    assert all(f"{m} [" in ci_line for m in figures)


def test_fashioniq_categories_are_averaged(myntra, tmp_path, capsys):
    files = build_fashioniq_format(myntra / "products.jsonl", tmp_path / "fiq", n_per_category=4,
                                   categories={"shirt": "Shirts", "dress": "Dresses"})
    main_args = ["cir", "--dataset", "fashioniq", "--images-root", str(myntra / "images"), "--out",
                 str(tmp_path / "run"), "--encoder", str(tiny_clip_dir()), "--stages", "baseline", "--quiet",
                 "--resamples", "0"]
    for f in files:
        main_args += ["--annotations", str(f)]
    try:
        main(main_args)
    except SystemExit as e:
        assert e.code in (0, None)
    summary = json.loads((tmp_path / "run/metrics.json").read_text())
    shirt = summary["datasets"]["fashioniq-shirt-val"]["baseline"]["R@10"]
    dress = summary["datasets"]["fashioniq-dress-val"]["baseline"]["R@10"]
    assert summary["average"]["baseline"]["R@10"] == pytest.approx((shirt + dress) / 2)
    assert (tmp_path / "run/fashioniq-shirt-val/rankings.jsonl").exists()
    assert "intervals" not in summary["datasets"]["fashioniq-shirt-val"]["baseline"]  # --resamples 0: none


def test_missing_images_and_bad_options_fail_with_one_line(cir_data, tmp_path, capsys):
    code, _, err = _cli(["cir", "--dataset", "cirr", "--annotations", str(cir_data / "cirr/captions/cap.rc2.val.json"),
                         "--images-root", str(tmp_path), "--out", str(tmp_path / "run"), "--limit", "2",
                         "--encoder", str(tiny_clip_dir()), "--quiet"], capsys)
    n_pool = len(json.loads((cir_data / "cirr/image_splits/split.rc2.val.json").read_text()))
    assert code == 2 and f"none of the {n_pool} pool images exist" in err
    assert f"{n_pool} of {n_pool} pool images" in err
    missing = json.loads((tmp_path / "run/missing_images.json").read_text())
    assert len(missing["pool_missing"]) == n_pool
    code, _, err = _cli(["cir", "--dataset", "cirr", "--annotations", str(tmp_path / "nope.json"),
                         "--images-root", str(tmp_path), "--out", str(tmp_path / "r2")], capsys)
    assert code == 2 and "nope.json" in err and "file not found" in err
    code, _, err = _cli(["cir", "--dataset", "cirr", "--annotations", "x.json", "--images-root", str(tmp_path),
                         "--out", str(tmp_path / "r3"), "--stages", "coarse,magic"], capsys)
    assert code == 2 and "stages" in err
