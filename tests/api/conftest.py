"""The API tests' retriever over the ``demo`` sample index (tests/conftest.py: built once per session,
shared with the service tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fake_openai_server


@pytest.fixture(scope="session")
def retriever(demo):
    import unirag

    return unirag.Retriever(demo["index"]).warm_up()
