"""The retrieval fixtures (a COCO mini index) and a small COCO caption set, shared with their own suites."""

import importlib.util
from pathlib import Path

import pytest

from index.fixtures import coco_index, coco_mbeir, coco_oracle_encoder  # noqa: F401


def _generation_helpers():
    path = Path(__file__).resolve().parents[1] / "generation" / "conftest.py"
    spec = importlib.util.spec_from_file_location("generation_conftest_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def coco_set(coco_mini: Path, tmp_path_factory) -> dict:
    """12 COCO image queries, their pool and a retrieval run (tests/generation/conftest.py build_coco_mbeir)."""
    return _generation_helpers().build_coco_mbeir(coco_mini, tmp_path_factory.mktemp("coco_mbeir"))
