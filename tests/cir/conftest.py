"""CIR tests build their real-image sets with ``scripts/myntra_cir.py`` (a data script, not library code)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))


@pytest.fixture()
def official_server(tmp_path):
    """A local OpenAI-protocol server answering the xr_fixtures world's agents, one-statement yes/no
    calls included (xr_fixtures.single_responder)."""
    from xr_fixtures import make_world, single_responder

    from fake_openai_server import FakeServer

    root = tmp_path / "images"
    make_world(root)
    with FakeServer(responder=single_responder(root)) as srv:
        yield srv
