"""The profile mechanism: a profile is a named set of setting values, overridable one at a time."""

import pytest

from unirag import profiles
from unirag.errors import ConfigError
from unirag.profiles import Setting, Settings, resolve


@pytest.fixture
def two_settings(monkeypatch):
    table = {
        "scoring": Setting("scoring", "paper", "official", "how to score", choices=("paper", "official")),
        "verifier": Setting("verifier", "fixed", "bool-bug", "verifier answers", choices=("fixed", "bool-bug"),
                            official_bug=True),
        "temperature": Setting("temperature", 0.0, None, "sampling temperature",
                               parse=lambda s: None if s == "none" else float(s)),
    }
    monkeypatch.setattr(profiles, "SETTINGS", table)
    return table


def test_profile_values_and_one_override(two_settings):
    s = resolve("official", scoring="paper")
    assert s["scoring"] == "paper" and s["verifier"] == "bool-bug" and s["temperature"] is None
    assert s.overrides == ("scoring",)
    assert resolve("default")["temperature"] == 0.0
    assert resolve("default", temperature="0.25")["temperature"] == 0.25


def test_manifest_round_trip_names_reproduced_bugs(two_settings):
    s = resolve("official", temperature="none")
    d = s.to_dict()
    assert d["profile"] == "official" and d["reproduces_official_bugs"] == ["verifier"]
    assert "reproduces_official_bugs" not in resolve("default").to_dict()
    back = Settings.from_dict(d)
    assert dict(back) == dict(s) and back.overrides == s.overrides


def test_bad_profile_setting_or_value_is_a_config_error(two_settings):
    with pytest.raises(ConfigError, match="unknown profile 'offical'"):
        resolve("offical")
    with pytest.raises(ConfigError, match="unknown setting.*scorng"):
        resolve("default", scorng="paper")
    with pytest.raises(ConfigError, match="must be one of paper, official"):
        resolve("default", scoring="both")
    with pytest.raises(ConfigError, match="cannot read 'hot'"):
        resolve("default", temperature="hot")


def test_a_row_without_parse_or_choices_takes_the_two_profiles_values(monkeypatch):
    """Most rows are a two-way choice; the table states only the two values and the check follows."""
    row = Setting("xr_like", "paper", "official", "two-way")
    assert row.choices == ("paper", "official")
    assert Setting("n", 1, 2, "a number", parse=int).choices is None  # parsed rows take any value read
    monkeypatch.setattr(profiles, "SETTINGS", {"xr_like": row})
    assert resolve("default", xr_like="official")["xr_like"] == "official"
    with pytest.raises(ConfigError, match="must be one of paper, official; got 'both'"):
        resolve("default", xr_like="both")


def test_every_setting_is_declared_once():
    """The table becomes a dict by name, where a second row with the same name would silently replace
    the first."""
    from unirag.profiles import _ROWS, SETTINGS

    assert len(SETTINGS) == len(_ROWS), sorted(n for n in SETTINGS if sum(s.name == n for s in _ROWS) > 1)
