"""Real-data suite (`make test-data`): tests that need the full shared data folder.

Reads ``$UNIRAG_SHARED_DATA`` or ``../shared/data`` beside the repository; when neither exists the run
stops at once with a message saying where it looked (never skips). The default suite (tests/) uses
the small committed slices instead and must not read this folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("UNIRAG_SHARED_DATA") or REPO.parent / "shared" / "data")

# helpers shared with the default suite (tiny_models, ...) live in tests/
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "scripts"))  # myntra_cir: the CIR set builder is a data script
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    if not (SHARED_DATA / "coco-val2017-mini").is_dir():
        raise pytest.UsageError(
            f"tests-data needs the real shared data folder, not found at {SHARED_DATA} "
            "(expected coco-val2017-mini/, myntra-fashion-3k/, cir/ inside); set UNIRAG_SHARED_DATA=/path/to/data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED_DATA


@pytest.fixture(scope="session")
def coco_mini() -> Path:
    """159 real COCO val2017 photos with 5 captions each, plus the official 5,000-image caption file."""
    return SHARED_DATA / "coco-val2017-mini"


@pytest.fixture(scope="session")
def myntra() -> Path:
    """3,000 real fashion product photos with titles (products.jsonl + images/)."""
    return SHARED_DATA / "myntra-fashion-3k"


@pytest.fixture(scope="session")
def cir_data() -> Path:
    """The full CIRR, FashionIQ and CIRCO annotation files."""
    return SHARED_DATA / "cir"
