"""Fixtures for the service tests: the bundled real sample (51 COCO photos) indexed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "unirag" / "demo" / "data"
PHOTOS = sorted((SAMPLE / "images").glob("*.jpg"))


@pytest.fixture(scope="session")
def demo_index(tmp_path_factory) -> Path:
    """Import the bundled sample and build its index with the offline encoder (once per session)."""
    from unirag.data.importers.coco import import_coco
    from unirag.encoders.registry import load_encoder
    from unirag.index.build import build_index

    root = tmp_path_factory.mktemp("serve-demo")
    import_coco(SAMPLE / "captions.json", SAMPLE / "images", root / "data", show_progress=False)
    build_index(root / "data" / "pool.jsonl", (SAMPLE / "images").resolve(), root / "index", load_encoder(None),
                progress=False)
    return root / "index"


@pytest.fixture(scope="session")
def engine(demo_index):
    """One loaded engine (encoder + index + offline generators) shared by the API tests."""
    from unirag.serve.engine import Engine
    from unirag.serve.settings import ServeSettings

    eng = Engine(ServeSettings(index=demo_index))
    yield eng
    eng.close()


@pytest.fixture
def photo_bytes() -> bytes:
    return PHOTOS[0].read_bytes()
