"""Query texts and the CIRR validation cut of the official X^R loaders (settings ``xr_query_text``,
``xr_cirr_val_limit``), on hand-written annotation files. Cites: 01yzzyu/xr.github.io XR/utils/data.py
at commit cf44a37 (lines counted on the stored copy; no official code is copied)."""

from __future__ import annotations

import json

import pytest

from unirag.cir import api
from unirag.cir.datasets import join_fashioniq_captions, load_dataset
from unirag.cli.main import main
from unirag.errors import InputError


def _fashioniq(tmp_path, captions):
    (tmp_path / "captions").mkdir(parents=True)
    (tmp_path / "image_splits").mkdir()
    rows = [{"candidate": f"r{i}", "target": f"t{i}", "captions": c} for i, c in enumerate(captions)]
    (tmp_path / "captions" / "cap.dress.val.json").write_text(json.dumps(rows))
    names = [f"{k}{i}" for i in range(len(captions)) for k in "rt"]
    (tmp_path / "image_splits" / "split.dress.val.json").write_text(json.dumps(names))
    return tmp_path / "captions" / "cap.dress.val.json"


def _cirr(tmp_path, captions, split="val"):
    (tmp_path / "captions").mkdir(parents=True, exist_ok=True)
    (tmp_path / "image_splits").mkdir(exist_ok=True)
    rows = [{"pairid": i, "reference": "a", "target_hard": "b", "caption": c,
             "img_set": {"members": ["a", "b"]}} for i, c in enumerate(captions)]
    (tmp_path / "captions" / f"cap.rc2.{split}.json").write_text(json.dumps(rows))
    (tmp_path / "image_splits" / f"split.rc2.{split}.json").write_text(json.dumps({"a": "./a.png", "b": "./b.png"}))
    return tmp_path / "captions" / f"cap.rc2.{split}.json"


def test_official_fashioniq_text_strips_only_dot_question_space_and_always_joins(tmp_path):
    """01yzzyu/xr.github.io XR/utils/data.py:130 (load_FashionIQ): captions[0].strip('.? ') + ' and ' +
    captions[1].strip('.? '): a comma and a newline stay, an empty caption still gets its ' and '.
    unirag's paper reading (CLIP4Cir / CIReVL) strips whitespace and ',' too and drops an empty one."""
    caps = [["is red, ", "has sleeves."], [" is shiny\n", "?"], ["...", "is long?"]]
    path = _fashioniq(tmp_path, caps)
    official = [q.text for q in load_dataset("fashioniq", path, query_text="official").queries]
    assert official == ["is red, and has sleeves", "is shiny\n and ", " and is long"]
    paper = [q.text for q in load_dataset("fashioniq", path).queries]
    assert paper == ["is red and has sleeves", "is shiny", "is long"]
    assert join_fashioniq_captions(["a", "b", "c"], "official") == "a and b"  # only the first two


def test_official_cirr_text_strips_and_names_an_empty_caption(tmp_path):
    """01yzzyu/xr.github.io XR/utils/data.py:82 (load_CIRR: item['caption'].strip()) and :87-88 (an
    empty instruction becomes 'the same image'); unirag's default keeps the caption as written."""
    path = _cirr(tmp_path, [" add a dog \n", "   ", ""])
    official = [q.text for q in load_dataset("cirr", path, query_text="official").queries]
    assert official == ["add a dog", "the same image", "the same image"]
    assert [q.text for q in load_dataset("cirr", path).queries] == [" add a dog \n", "   ", ""]


def test_circo_text_is_kept_as_written_under_both(tmp_path):
    """01yzzyu/xr.github.io XR/utils/data.py load_CIRCO keeps item['relative_caption'] as it is."""
    path = tmp_path / "val.json"
    path.write_text(json.dumps([{"id": 0, "reference_img_id": 1, "target_img_id": 2, "gt_img_ids": [2],
                                 "relative_caption": " is blue. "}]))
    for mode in ("paper", "official"):
        assert load_dataset("circo", path, query_text=mode).queries[0].text == " is blue. "


def test_cirr_validation_keeps_the_first_2400_queries(tmp_path):
    """01yzzyu/xr.github.io XR/utils/data.py:99 (load_CIRR: val_data[...][:2400], "only for testing"):
    only the validation file is cut (test1 is read whole, :100); a note says so; --limit cuts after it."""
    caps = [f"caption {i}" for i in range(2403)]
    val = _cirr(tmp_path, caps)
    ds = load_dataset("cirr", val, cirr_val_limit=2400)
    assert len(ds.queries) == 2400 and ds.queries[-1].qid == "2399"
    assert any("first 2400 of 2403" in n for n in ds.notes)
    assert len(load_dataset("cirr", val).queries) == 2403
    assert len(load_dataset("cirr", val, limit=5, cirr_val_limit=2400).queries) == 5
    test = _cirr(tmp_path, caps, split="test1")
    ds = load_dataset("cirr", test, cirr_val_limit=2400)
    assert len(ds.queries) == 2403 and not ds.notes


class _Stop(Exception):
    pass


@pytest.fixture()
def loader_calls(monkeypatch):
    """What run_cir hands the loader (the run stops there)."""
    calls = []

    def fake(*args, **kwargs):
        calls.append(kwargs)
        raise _Stop

    monkeypatch.setattr(api, "load_dataset", fake)
    return calls


def test_profile_settings_reach_the_loader(tmp_path, loader_calls):
    """Under the official profile run_cir reads the annotations as the official loaders
    (XR/utils/data.py:82-88, :99, :130); the default profile keeps unirag's reading."""
    path = _cirr(tmp_path, ["x"])
    for profile, overrides in (("official", {}), ("default", {}), ("official", {"xr_cirr_val_limit": "none"})):
        with pytest.raises(_Stop):
            api.run_cir("cirr", path, images_root=tmp_path, out_dir=tmp_path / "out", profile=profile,
                        overrides=overrides, progress=False, echo=lambda s: None)
    assert [(c["query_text"], c["cirr_val_limit"]) for c in loader_calls] == [
        ("official", 2400), ("paper", None), ("official", None)]


def test_cli_options_reach_the_loader(tmp_path, monkeypatch, capsys):
    """``--xr-query-text`` and ``--xr-cirr-val-limit`` on ``unirag cir``."""
    calls = []

    def fake(*args, **kwargs):
        calls.append(kwargs)
        raise InputError("stopped here")

    monkeypatch.setattr(api, "load_dataset", fake)
    path = _cirr(tmp_path, ["x"])
    with pytest.raises(SystemExit) as e:
        main(["cir", "--dataset", "cirr", "--annotations", str(path), "--images-root", str(tmp_path),
              "--out", str(tmp_path / "out"), "--set", "xr_query_text=official", "--set", "xr_cirr_val_limit=2400"])
    assert e.value.code == 2 and "stopped here" in capsys.readouterr().err
    assert (calls[0]["query_text"], calls[0]["cirr_val_limit"]) == ("official", 2400)
    with pytest.raises(SystemExit) as e:
        main(["cir", "--dataset", "cirr", "--annotations", str(path), "--images-root", str(tmp_path),
              "--out", str(tmp_path / "out"), "--set", "xr_cirr_val_limit=100"])
    assert e.value.code == 2 and "must be one of None, 2400" in capsys.readouterr().err
