"""``Index.build`` from Python as a new user calls it: a progress bar when stderr is a terminal (none
in a log file), and every skipped input (a truncated JPEG, a missing file) reported as a warning with
the count and the first paths, and on the returned index."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from unirag import Index, Pool
from unirag.errors import SkippedInputsWarning


@pytest.fixture
def pairs_with_bad_inputs(myntra: Path, tmp_path: Path) -> list[tuple[Path, str]]:
    photos = sorted((myntra / "images").iterdir())[:4]
    good = [(shutil.copyfile(p, tmp_path / p.name), f"product {i}") for i, p in enumerate(photos)]
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(photos[0].read_bytes()[:1500] + b"x")  # another photo, cut short
    return [*good, (truncated, "a cut photo"), (tmp_path / "gone.jpg", "a missing photo")]


def test_skipped_inputs_are_a_warning_and_on_the_index(pairs_with_bad_inputs, tmp_path) -> None:
    with pytest.warns(SkippedInputsWarning, match=r"2 input\(s\) missing or unreadable, skipped: .*gone\.jpg") as w:
        index = Index.build(Pool.from_pairs(pairs_with_bad_inputs), tmp_path / "idx", progress=False)
    (skipped,) = [x for x in w if issubclass(x.category, SkippedInputsWarning)]  # (not another test's leftovers)
    assert "truncated.jpg" in str(skipped.message)
    assert index.skipped_count == 2 and index.counts["image"] == 4
    assert {Path(p).name for p, _ in index.skipped} == {"truncated.jpg", "gone.jpg"}
    assert all(reason for _, reason in index.skipped)


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_by_default_only_in_a_terminal(pairs_with_bad_inputs, tmp_path, capsys, monkeypatch,
                                                terminal) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    with pytest.warns(SkippedInputsWarning):
        Index.build(Pool.from_pairs(pairs_with_bad_inputs), tmp_path / "idx")
    err = capsys.readouterr().err
    assert ("index build" in err) is terminal
