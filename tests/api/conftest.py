"""The bundled demo sample (51 real COCO photos, 255 captions) imported and indexed once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fake_openai_server

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "unirag" / "demo" / "data"


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> dict[str, Path]:
    """M-BEIR files of the demo sample, an index built through ``unirag.Index.build`` (offline encoder)."""
    from unirag.data.importers.coco import import_coco
    from unirag.data.pool import Pool
    from unirag.index.handle import Index

    root = tmp_path_factory.mktemp("demo")
    data = root / "data"
    import_coco(SAMPLE / "captions.json", SAMPLE / "images", data, show_progress=False)
    Index.build(Pool.read(data / "pool.jsonl", SAMPLE / "images"), root / "index")
    return {"root": root, "data": data, "index": root / "index", "images": SAMPLE / "images",
            "pool": data / "pool.jsonl", "i2t": data / "queries_task3_image2text.jsonl",
            "t2i": data / "queries_task0_text2image.jsonl", "qrels_i2t": data / "qrels_task3.txt",
            "qrels_t2i": data / "qrels_task0.txt"}


@pytest.fixture(scope="session")
def retriever(demo):
    import unirag

    return unirag.Retriever(demo["index"]).warm_up()
