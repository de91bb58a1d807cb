"""Fixtures for the service tests: the bundled real sample (51 COCO photos) indexed once per session
(``demo``, tests/conftest.py, shared with the API tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "unirag" / "demo" / "data"
PHOTOS = sorted((SAMPLE / "images").glob("*.jpg"))


@pytest.fixture(scope="session")
def demo_index(demo) -> Path:
    """The bundled sample's index with the offline encoder (tests/conftest.py ``demo``: once per session)."""
    return demo["index"]


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
