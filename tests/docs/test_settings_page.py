"""docs/settings.md lists exactly the settings table of src/unirag/profiles.py, with each profile's value,
and exactly the example-selection names ``--set`` takes: the page cannot fall behind the code."""

from __future__ import annotations

import re
from pathlib import Path

from unirag.profiles import SETTINGS
from unirag.retrieval.selection import SELECTION_SETTINGS

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
    assert rows == list(SELECTION_SETTINGS)


def test_the_selection_names_are_one_list():
    """``--set`` checks names against :data:`unirag.profiles.SELECTION_NAMES` (profiles imports nothing
    from retrieval); how each is read lives in :data:`unirag.retrieval.selection.SELECTION_SETTINGS`."""
    from unirag.profiles import SELECTION_NAMES

    assert list(SELECTION_NAMES) == list(SELECTION_SETTINGS)
