"""A dry run that says "ready" means the run can start (issue 28, point 7): the X^R grid's official
profile needs the official checkout, named by the dry run; an API key is asked for only where the
server needs one; each cell lists only the settings it uses; and the grid credits X^R's authors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_capture import main_result as _cli

REPO = Path(__file__).resolve().parents[2]
GRIDS = REPO / "examples" / "reproduce"


def _xr_inputs(root: Path, agents: str) -> None:
    """The paths examples/reproduce/xr-results.yaml names, present (a dry run only checks them)."""
    for d in ("fashioniq", "cirr", "circo"):
        (root / "data" / "cir" / d / "images").mkdir(parents=True, exist_ok=True)
    for f in ("fashioniq/captions/cap.dress.val.json", "fashioniq/captions/cap.shirt.val.json",
              "fashioniq/captions/cap.toptee.val.json", "cirr/captions/cap.rc2.val.json",
              "circo/annotations/val.json", "circo/image_info_unlabeled2017.json",
              "cirr/captions/cap.rc2.test1.json", "circo/annotations/test.json"):  # the test-split cells
        (root / "data" / "cir" / f).parent.mkdir(parents=True, exist_ok=True)
        (root / "data" / "cir" / f).write_text("[]")
    (root / "xr").mkdir(exist_ok=True)
    (root / "xr" / "agents.yaml").write_text(agents)


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_xr_dry_run_names_the_official_checkout_until_it_is_there(tmp_path, capsys) -> None:
    local = "defaults: {model: 'openai:Qwen/Qwen2.5-VL-7B-Instruct', base_url: 'http://127.0.0.1:8000/v1'}\n"
    _xr_inputs(tmp_path, local)
    args = ["run", str(GRIDS / "xr-results.yaml"), "--dry-run", "--data-root", str(tmp_path)]
    code, out, err = _cli(args, capsys)
    assert code == 2 and "official_prompts: NOT SET" in out and "official X^R checkout" in err
    assert "OPENAI_API_KEY" not in out + err  # a local OpenAI-compatible server needs no key

    (tmp_path / "xr" / "xr.github.io").mkdir()
    (tmp_path / "xr" / "agents.yaml").write_text(local + "official_prompts: xr.github.io\n")
    code, out, err = _cli(args, capsys)
    assert code in (0, None), err
    assert "5 cell(s) ready" in out and "official_prompts: " in out and "MISSING" not in out


def test_xr_dry_run_asks_for_the_key_of_the_openai_api(tmp_path, capsys) -> None:
    _xr_inputs(tmp_path, "defaults: {model: 'openai:gpt-4o'}\nofficial_prompts: /nonexistent/xr-checkout\n")
    code, out, err = _cli(["run", str(GRIDS / "xr-results.yaml"), "--dry-run", "--data-root", str(tmp_path)], capsys)
    assert code == 2 and "key OPENAI_API_KEY: NOT SET" in out
    assert "official_prompts: /nonexistent/xr-checkout: MISSING" in out


def test_each_cell_lists_only_the_settings_it_uses(tmp_path, capsys) -> None:
    code, out, _ = _cli(["run", str(GRIDS / "unirag-table3-mscoco-captions.yaml"), "--dry-run", "--data-root",
                         str(tmp_path)], capsys)
    profiles = [line for line in out.splitlines() if "profile: official" in line]
    assert profiles and not any("xr_" in line for line in profiles)
    assert all("caption_prompts=official" in line for line in profiles)
    _xr_inputs(tmp_path, "defaults: {model: 'openai:m', base_url: 'http://127.0.0.1:1/v1'}\n")
    code, out, _ = _cli(["run", str(GRIDS / "xr-results.yaml"), "--dry-run", "--data-root", str(tmp_path)], capsys)
    profiles = [line for line in out.splitlines() if "profile: official" in line]
    assert profiles and all("xr_prompts=official" in line and "caption_prompts" not in line for line in profiles)


def test_xr_grid_credits_the_authors_of_the_readme_citation() -> None:
    readme = (REPO / "README.md").read_text()
    bib = readme[readme.index("@inproceedings{yang2026xr"):]
    authors = re.search(r"author\s*=\s*\{([^}]*)\}", bib).group(1)
    surnames = [a.split(",")[0].strip() for a in authors.split(" and ")]
    header = (GRIDS / "xr-results.yaml").read_text()
    source = re.search(r"^source: (.*)$", header, re.M).group(1)
    assert surnames == ["Yang", "Pang", "Yuan"]
    assert all(s in source and s in header.splitlines()[0] for s in surnames)


def test_the_grids_official_checkout_reaches_the_cir_run(tmp_path, capsys, monkeypatch) -> None:
    import unirag.cir.api as api

    seen = []
    monkeypatch.setattr(api, "run_cir", lambda *a, **kw: seen.append(kw) or {"xr": {"n_queries": 0}})
    _xr_inputs(tmp_path, "defaults: {model: 'openai:m', base_url: 'http://127.0.0.1:1/v1'}\n")
    (tmp_path / "checkout").mkdir()
    code, _, err = _cli(["run", str(GRIDS / "xr-results.yaml"), "--data-root", str(tmp_path), "--out",
                         str(tmp_path / "out"), "--option", f"official_prompts={tmp_path / 'checkout'}",
                         "--no-progress"], capsys)
    assert code in (0, None), err
    assert len(seen) == 5 and all(kw["official_prompts"] == str(tmp_path / "checkout") for kw in seen)
