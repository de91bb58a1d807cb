"""Session fixtures shared by tests/index and tests/retrieval (imported by both conftest files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.helpers import coco_oracle, write_coco_mbeir
from unirag import Index


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
    Index.build(coco_mbeir["pool"], out, encoder=coco_oracle_encoder, images_root=coco_mini, progress=False)
    return out


DEMO_DATA = Path(__file__).resolve().parents[2] / "src" / "unirag" / "demo" / "data"


@pytest.fixture(scope="session")
def demo_images() -> Path:
    """The bundled sample's 51 real COCO photos."""
    return DEMO_DATA / "images"


@pytest.fixture(scope="session")
def demo_mbeir(tmp_path_factory) -> dict[str, Path]:
    """M-BEIR files imported from the bundled sample (pool: 51 photos + 255 captions, in that interleaving)."""
    from unirag.data.importers.coco import import_coco

    out = tmp_path_factory.mktemp("demo_mbeir")
    import_coco(DEMO_DATA / "captions.json", DEMO_DATA / "images", out, show_progress=False)
    return {"pool": out / "pool.jsonl", "i2t": out / "queries_task3_image2text.jsonl",
            "t2i": out / "queries_task0_text2image.jsonl"}


@pytest.fixture(scope="session")
def tiny_encoder_spec() -> str:
    """A tiny random CLIP checkpoint on disk: loadable by path in any process (Ray workers too)."""
    from tiny_models import tiny_clip_dir

    return str(tiny_clip_dir())
