"""Shared fixtures. Real data comes from ../shared/data (present in CI); a missing folder fails loudly."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

# No test may reach the network: hub libraries fail at once instead of retrying (this also reaches
# the subprocesses tests start), and any connection to a non-loopback address raises.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
_real_connect = socket.socket.connect


def _loopback_only_connect(self, address):
    host = address[0] if isinstance(address, tuple) else None
    if host is not None:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise RuntimeError(f"test tried to reach the network: {address!r}")
    return _real_connect(self, address)


socket.socket.connect = _loopback_only_connect

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("UNIRAG_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        raise RuntimeError(f"real test data not found at {SHARED_DATA}; set UNIRAG_SHARED_DATA")
    return SHARED_DATA


@pytest.fixture(scope="session")
def coco_mini(shared_data: Path) -> Path:
    """159 real COCO val2017 photos with 5 captions each (captions.jsonl + images/)."""
    return shared_data / "coco-val2017-mini"


@pytest.fixture(scope="session")
def myntra(shared_data: Path) -> Path:
    """3,000 real fashion product photos with titles (products.jsonl + images/)."""
    return shared_data / "myntra-fashion-3k"


@pytest.fixture(scope="session")
def cir_data(shared_data: Path) -> Path:
    return shared_data / "cir"
