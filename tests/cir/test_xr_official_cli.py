"""``unirag cir --profile`` and the ``--xr-*`` options, and ``unirag.XR(profile=...)``."""

from __future__ import annotations

import json

import pytest
from myntra_cir import build_colour_cir
from xr_fixtures import (
    CROSS_IMAGE,
    CROSS_TEXT,
    TEXT_TABLE,
    TableEncoder,
    agent_config,
    make_world,
    official_checkout,
)

import unirag
from cli_capture import main_result as _cli
from tiny_models import tiny_clip_dir


def _set(myntra, tmp_path):
    return build_colour_cir(myntra / "products.jsonl", tmp_path / "set", n_queries=2, seed=1, pool_size=12)


def test_profile_and_single_settings_reach_the_manifest(myntra, tmp_path, capsys):
    q, pool = _set(myntra, tmp_path)
    code, _, err = _cli(["cir", "--dataset", "mbeir", "--annotations", str(q), "--split-file", str(pool),
                         "--images-root", str(myntra), "--out", str(tmp_path / "run"), "--encoder",
                         str(tiny_clip_dir()), "--stages", "baseline", "--quiet", "--profile", "official",
                         "--set", "xr_scoring=paper", "--set", "xr_prompts=unirag", "--set", "xr_max_statements=none"], capsys)
    assert code == 0, err
    settings = json.loads((tmp_path / "run/manifest.json").read_text())["settings"]
    assert settings["profile"] == "official" and settings["overrides"] == ["xr_max_statements", "xr_prompts",
                                                                           "xr_scoring"]
    assert settings["settings"]["xr_scoring"] == "paper" and settings["settings"]["xr_max_statements"] is None
    assert settings["settings"]["xr_questions"] == "single"
    assert "xr_caption_verifier" in settings["reproduces_official_bugs"]
    lines = [line for line in err.splitlines() if line.startswith("profile official")]
    assert len(lines) == 1 and lines[0].startswith(
        "profile official, overrides xr_max_statements, xr_prompts, xr_scoring; reproduces official bug(s): ")
    assert "xr_caption_verifier" in lines[0]


def test_bad_setting_values_and_missing_official_prompts_fail_with_one_line(myntra, tmp_path, capsys):
    q, pool = _set(myntra, tmp_path)
    base = ["cir", "--dataset", "mbeir", "--annotations", str(q), "--split-file", str(pool), "--images-root",
            str(myntra), "--encoder", str(tiny_clip_dir()), "--quiet"]
    code, _, err = _cli(base + ["--out", str(tmp_path / "r1"), "--set", "xr_scoring=sometimes"], capsys)
    assert code == 2 and "xr_scoring" in err and "paper, official" in err and "Traceback" not in err
    agents = tmp_path / "agents.yaml"
    agents.write_text("defaults: {model: 'openai:fake', base_url: 'http://127.0.0.1:9/v1'}\n")
    code, _, err = _cli(base + ["--out", str(tmp_path / "r2"), "--agents", str(agents), "--profile", "official"],
                        capsys)
    assert code == 2 and "official" in err and "--official-prompts" in err and "Traceback" not in err
    assert not (tmp_path / "r2/metrics.json").exists()


def test_xr_api_takes_the_profile(tmp_path, official_server):
    """``unirag.XR(profile="official", official_prompts=<one dataset's folder>)``: the official path
    of test_xr_official.py's hand computation, from the Python API."""
    root = tmp_path / "images"
    make_world(root)
    prompts = official_checkout(tmp_path) / "XR" / "prompts" / "FashionIQ-dress"
    config = agent_config(official_server.url)
    xr = unirag.XR(config, profile="official", official_prompts=prompts, work_dir=tmp_path / "xr")
    xr._encoder, xr._text_encoder = TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"), TableEncoder(TEXT_TABLE)
    gallery = {f"c{i}": root / f"c{i}.png" for i in range(1, 6)}
    hits = xr.search(root / "ref.png", "make it red", gallery, k=4)
    assert len(hits) == 4 and xr.search(root / "ref.png", "make it red", gallery, k=5)[:4] == hits
    # the caller's config is the caller's: neither the object nor a search changes it
    assert (config.encoder, config.official_prompts, config.settings.k) == (None, None, 5)
    assert xr.config.settings.k == 5 and not (tmp_path / "xr/searches").exists()  # ranked in memory
    hits = xr.search(root / "ref.png", "make it red", gallery, k=5)
    assert [h.did for h in hits] == ["c5", "c1", "c2", "c4", "c3"] and {h.stage for h in hits} == {"xr"}
    assert hits[0].scores["similarity"] == pytest.approx(0.67, abs=1e-6)
    assert xr.to_dict()["settings"]["profile"] == "official"
    assert xr.config.encoder == "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"  # the official default, as none was named


def test_the_reply_and_cir_v2_settings_are_cli_options(myntra, tmp_path, capsys):
    """--xr-json-parsing, --xr-caption-repetition-penalty, --xr-answer-matching, --xr-stage1-schema and
    --xr-rewrite-caption (on|off) set their settings alone on top of the profile (docs/xr-parity.md)."""
    q, pool = _set(myntra, tmp_path)
    base = ["cir", "--dataset", "mbeir", "--annotations", str(q), "--split-file", str(pool), "--images-root",
            str(myntra), "--encoder", str(tiny_clip_dir()), "--stages", "baseline", "--quiet"]
    code, _, err = _cli(base + ["--out", str(tmp_path / "run"), "--profile", "official", "--set", "xr_json_parsing=unirag",
                                "--set", "xr_caption_repetition_penalty=none", "--set", "xr_answer_matching=boolean",
                                "--set", "xr_stage1_schema=v1", "--set", "xr_rewrite_caption=off"], capsys)
    assert code == 0, err
    s = json.loads((tmp_path / "run/manifest.json").read_text())["settings"]
    assert (s["settings"]["xr_json_parsing"], s["settings"]["xr_caption_repetition_penalty"],
            s["settings"]["xr_answer_matching"], s["settings"]["xr_stage1_schema"],
            s["settings"]["xr_rewrite_caption"]) == ("unirag", None, "boolean", "v1", False)
    code, _, err = _cli(base + ["--out", str(tmp_path / "r2"), "--set", "xr_rewrite_caption=maybe"], capsys)
    assert code == 2 and "xr_rewrite_caption" in err and "Traceback" not in err
    code, _, err = _cli(base + ["--out", str(tmp_path / "r3"), "--set", "xr_caption_repetition_penalty=1.1",
                                "--set", "xr_rewrite_caption=on"], capsys)
    assert code == 0, err
    s = json.loads((tmp_path / "r3/manifest.json").read_text())["settings"]["settings"]
    assert s["xr_caption_repetition_penalty"] == 1.1 and s["xr_rewrite_caption"] is True
