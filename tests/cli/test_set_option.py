"""``--profile`` plus ``--set NAME=VALUE`` on every command that takes behaviour settings (issue 25): one
option for every row of the settings table, checked before any work, and no command over 35 options."""

from __future__ import annotations

import re

import pytest

from cli_capture import main_result


def _options(command: str, capsys) -> list[str]:
    code, out, _ = main_result([command, "--help"], capsys)
    assert code == 0
    return re.findall(r"^  (?:-\w, )?(--[\w-]+)", out, flags=re.M)


@pytest.mark.parametrize("command", ["caption", "generate-images", "cir", "run"])
def test_at_most_35_options_and_no_flag_per_setting(command, capsys):
    from unirag.profiles import SETTINGS

    options = _options(command, capsys)
    assert "--set" in options and "--profile" in options
    assert len(options) <= 35, (command, len(options))
    assert not {"--" + n.replace("_", "-") for n in SETTINGS} & set(options)


def _grid(tmp_path):
    (tmp_path / "q.jsonl").write_text("")
    grid = tmp_path / "grid.yaml"
    grid.write_text("out: runs\nqueries: q.jsonl\ngenerators: ['retrieval:top1']\ngrid:\n  - {mode: zero-shot, k: 0}\n")
    return grid


@pytest.mark.parametrize("args", [["cir", "--dataset", "cirr", "--annotations", "a.json", "--images-root", ".",
                                   "--out", "o"], ["run", "GRID", "--list"],
                                  ["caption", "--queries", "q.jsonl", "--out", "o"]])
def test_an_unknown_setting_is_one_line_naming_the_known_ones(args, tmp_path, capsys):
    args = [str(_grid(tmp_path)) if a == "GRID" else a for a in args]
    code, _, err = main_result([*args, "--set", "xr_scorng=official"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "unknown setting 'xr_scorng'" in err and "xr_scoring" in err and "temperature" in err
    assert ("diversity" in err) == (args[0] != "cir")  # cir chooses no few-shot examples


def test_a_bad_value_names_the_choices_and_a_missing_equals_sign_is_refused(tmp_path, capsys):
    grid = str(_grid(tmp_path))
    code, _, err = main_result(["run", grid, "--list", "--set", "xr_scoring=sometimes"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "setting 'xr_scoring' must be one of paper, official; got 'sometimes'" in err
    code, _, err = main_result(["run", grid, "--list", "--set", "diversity=most"], capsys)
    assert code == 2 and "none, mmr" in err and len(err.strip().splitlines()) == 1
    code, _, err = main_result(["run", grid, "--list", "--set", "xr_scoring"], capsys)
    assert code == 2 and "--set expects NAME=VALUE" in err


def test_run_set_reaches_every_cell_and_the_grid_takes_the_same_names(tmp_path, capsys):
    from unirag.pipelines.experiment_grid import GridOverrides, load_experiment
    from unirag.retrieval.selection import Selection

    grid = _grid(tmp_path)
    code, out, _ = main_result(["run", str(grid), "--list", "--set", "xr_scoring=official"], capsys)
    assert code == 0 and "not started" in out
    _, cells = load_experiment(grid, GridOverrides(settings={"xr_scoring": "official", "image_seed": "7"}))
    assert cells[0].settings["xr_scoring"] == "official" and cells[0].settings["image_seed"] == 7
    assert cells[0].settings.overrides == ("image_seed", "xr_scoring")
    grid.write_text(grid.read_text() + "settings: {xr_max_statements: none, one_per_image: on, filter: [dataset=mscoco]}\n")
    _, cells = load_experiment(grid)
    assert cells[0].settings["xr_max_statements"] is None
    chosen = Selection.of(cells[0].options["selection"])
    assert chosen.one_per_image and dict(chosen.where) == {"dataset": ("mscoco",)}


def test_values_are_read_by_the_settings_type():
    from unirag.profiles import read_assignments, resolve, split_settings
    from unirag.retrieval.selection import selection_from_settings

    overrides, chosen = split_settings(read_assignments(
        ["temperature=none", "xr_rewrite_caption=on", "xr_max_statements=3", "filter=dataset=mscoco",
         "filter=modality=image", "hash_threshold=4", "one_per_image=off"]))
    settings = resolve("official", **overrides)
    assert settings["temperature"] is None and settings["xr_rewrite_caption"] is True
    assert settings["xr_max_statements"] == 3
    sel = selection_from_settings(chosen)
    assert dict(sel.where) == {"dataset": ("mscoco",), "modality": ("image",)}
    assert sel.thresholds.image_hash == 4 and sel.one_per_image is False


def test_one_rule_for_the_examples_images_root():
    """--pool-images-root as given, else the index's recorded root, else the queries' --images-root:
    the same for caption runs, image runs and grid cells (they all call this function)."""
    from unirag.pipelines.examples import ExampleSelector, example_images_root

    class FromIndex(ExampleSelector):
        mode, k = "rag", 1
        images_root = "index-root"

        def select(self, query):
            return []

    class FromFile(FromIndex):
        images_root = None

    assert example_images_root("pool", FromIndex(), "queries") == "pool"
    assert example_images_root(None, FromIndex(), "queries") == "index-root"
    assert example_images_root(None, FromFile(), "queries") == "queries"
    assert example_images_root(None, None, None) is None


def test_generator_options_are_one_key_value_option_checked_by_name(tmp_path, capsys):
    """``caption --option KEY=VALUE`` (as ``run --option`` and a grid's options) replaces one flag per
    generator option; an unknown key is one line naming the known ones, exit 2."""
    q = tmp_path / "q.jsonl"
    q.write_text("")
    code, _, err = main_result(["caption", "--queries", str(q), "--out", str(tmp_path / "o"), "--mode", "zero-shot",
                                "--generator", "retrieval:top1", "--option", "similarity_typo=lexical"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown --option similarity_typo" in err and "trust_remote_code" in err
    from unirag.cli.options import key_values

    assert key_values(("trust_remote_code=true", "family=llava", "timeout=2.5"), "--option", True) == \
        {"trust_remote_code": True, "family": "llava", "timeout": 2.5}
