"""Session fixtures shared by tests/index and tests/retrieval (imported by both conftest files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.helpers import coco_oracle, write_coco_mbeir
from unirag.index.build import build_index


@pytest.fixture(scope="session")
def coco_oracle_encoder(coco_mini: Path):
    return coco_oracle(coco_mini)


@pytest.fixture(scope="session")
def coco_mbeir(coco_mini: Path, tmp_path_factory) -> dict[str, Path]:
    """M-BEIR files (pool with pairing, i2t/t2i queries, qrels) made from the real COCO mini captions."""
    return write_coco_mbeir(coco_mini, tmp_path_factory.mktemp("coco_mbeir"))


@pytest.fixture(scope="session")
def coco_index(coco_mbeir, coco_mini, coco_oracle_encoder, tmp_path_factory) -> Path:
    """A flat index of the whole COCO mini pool (51 real images + 255 real captions)."""
    out = tmp_path_factory.mktemp("coco_index") / "index"
    build_index(coco_mbeir["pool"], coco_mini, out, coco_oracle_encoder, progress=False)
    return out
