"""``unirag import coco`` writes the pool that ``unirag.Pool.from_coco`` holds in memory."""

from __future__ import annotations

from cli_runner import run_cli

import unirag
from unirag.data.mbeir import candidate_to_json
from unirag.demo import SAMPLE


def test_import_coco_matches_pool_from_coco(tmp_path):
    run_cli("import", "coco", "--captions", SAMPLE / "captions.json", "--images", SAMPLE / "images",
            "--out", tmp_path)
    written = unirag.Pool.read(tmp_path / "pool.jsonl", SAMPLE / "images")
    memory = unirag.Pool.from_coco(SAMPLE / "captions.json", images_root=SAMPLE / "images")
    assert [candidate_to_json(c) for c in memory] == [candidate_to_json(c) for c in written]
    assert len(memory) == 51 + 255 and memory.images_root == written.images_root
