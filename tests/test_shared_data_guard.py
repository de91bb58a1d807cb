"""The default suite's guard fails a test that reads the shared data folder, whatever the reading call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import shared_data_guard

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

INNER = '''
import glob
import json
from pathlib import Path

import pytest
from PIL import Image

SHARED = Path(__import__("os").environ["UNIRAG_SHARED_DATA"])


@pytest.fixture
def rows():
    return json.loads((SHARED / "rows.json").read_text())


def test_open(): open(SHARED / "a.txt").read()
def test_path_read(): (SHARED / "a.txt").read_bytes()
def test_pil(): Image.open(SHARED / "img.png").load()
def test_listing(): sorted(SHARED.iterdir())
def test_glob(): glob.glob(str(SHARED / "*.txt"))
def test_in_fixture(rows): assert rows == [1]
def test_elsewhere(tmp_path): (tmp_path / "x").write_text("ok"); assert (tmp_path / "x").read_text() == "ok"
'''


def test_guard_records_reads_under_a_forbidden_root(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "a.txt").write_text("x")
    (tmp_path / "b.txt").write_text("y")
    monkeypatch.setattr(shared_data_guard, "_ROOTS", [str(shared)])
    try:
        (tmp_path / "b.txt").read_text()
        assert shared_data_guard._reads == []
        (shared / "a.txt").read_text()
        list(shared.glob("*"))
        seen = list(shared_data_guard._reads)
    finally:
        shared_data_guard._reads.clear()
    assert seen[0] == f"open {shared / 'a.txt'}" and any(s.startswith("os.scandir") for s in seen[1:])


def test_guard_fails_each_reading_test_in_a_real_pytest_run(tmp_path):
    shared = tmp_path / "data"
    shared.mkdir()
    (shared / "a.txt").write_text("x")
    (shared / "rows.json").write_text("[1]")
    from PIL import Image

    Image.new("RGB", (4, 4)).save(shared / "img.png")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_reads.py").write_text(INNER)
    env = {**os.environ, "UNIRAG_SHARED_DATA": str(shared),
           "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "shared_data_guard", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "-rA", "--rootdir", str(inner), str(inner)],
                          cwd=inner, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    for name in ("test_open", "test_path_read", "test_pil", "test_listing", "test_glob"):
        assert f"FAILED test_reads.py::{name}" in out, out
    assert "ERROR test_reads.py::test_in_fixture" in out and "during setup" in out
    assert "PASSED test_reads.py::test_elsewhere" in out
    assert "read the shared data folder" in out and str(shared / "a.txt") in out
