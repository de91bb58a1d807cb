"""docs/settings.md lists exactly the settings table of src/unirag/profiles.py, with each profile's value,
and exactly the example-selection names ``--set`` takes: the page cannot fall behind the code."""

from __future__ import annotations

import re
from pathlib import Path

from unirag.profiles import SELECTION_NAMES, SETTINGS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _value(x) -> str:
    return "none" if x is None else "on" if x is True else "off" if x is False else str(x)


def test_the_settings_table_is_the_code_s():
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \| `([^`]*)` \|", _section(PAGE.read_text(), "The settings table"),
                      flags=re.M)
    assert [r[0] for r in rows] == list(SETTINGS)
    for name, default, official in rows:
        assert (default, official) == (_value(SETTINGS[name].default), _value(SETTINGS[name].official)), name


def test_the_selection_names_are_the_code_s():
    rows = re.findall(r"^\| `(\w+)` \|", _section(PAGE.read_text(), "Example selection"), flags=re.M)
    assert rows == list(SELECTION_NAMES)


def test_every_selection_name_sets_a_selection_field():
    """``--set`` names are checked and read by one table (:data:`unirag.profiles.SELECTION_NAMES`): each
    names a keyword :meth:`unirag.Selection.of` takes (a Selection or Thresholds field)."""
    from dataclasses import fields

    from unirag.retrieval.selection import Selection, Thresholds

    known = {f.name for f in fields(Selection)} | {f.name for f in fields(Thresholds)}
    assert {keyword for keyword, _, _ in SELECTION_NAMES.values()} <= known
