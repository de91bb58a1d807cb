"""Fixtures for the image-generation tests: real COCO captions/photos, a tiny random diffusers pipeline.

The pipeline is built from configs (no download), written with ``save_pretrained`` and loaded by the
product through ``diffusers:<dir>``, the same path a real checkpoint directory takes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

N_QUERIES = 6


@pytest.fixture()
def server():
    """A fresh local fake API server per test (the API backends' tests point base_url at it)."""
    from fake_openai_server import FakeServer

    with FakeServer() as srv:
        yield srv


@dataclass
class T2IData:
    """Caption queries of real COCO images + an image pool, in M-BEIR format."""

    root: Path  # images root (the coco-val2017-mini folder)
    queries: Path
    pool: Path
    run: Path  # a retrieval run whose top pair for query i is the image of query i+1 (with its caption)
    records: list[dict]  # the captions.jsonl lines used, in query order


@pytest.fixture(scope="session")
def t2i_data(coco_mini: Path, tmp_path_factory) -> T2IData:
    from unirag.retrieval.results import Hit, Hits, Pair
    from unirag.retrieval.run_io import write_retrieval_run

    lines = (coco_mini / "captions.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines[:N_QUERIES]]
    tmp = tmp_path_factory.mktemp("t2i")
    queries, pool, results = [], [], []
    for r in records:
        iid = str(r["image_id"])
        pool.append({"did": f"img:{iid}", "txt": None, "img_path": r["image"], "modality": "image",
                     "src_content": json.dumps({"source_id": iid})})
        pool.append({"did": f"txt:{iid}", "txt": r["captions"][1], "img_path": None, "modality": "text",
                     "src_content": json.dumps({"source_id": iid})})
        queries.append({"qid": f"coco:{iid}", "query_txt": r["captions"][0], "query_img_path": None,
                        "query_modality": "text", "query_src_content": None, "pos_cand_list": [f"img:{iid}"],
                        "neg_cand_list": [], "task_id": 0})
    for i, r in enumerate(records):
        nxt = records[(i + 1) % len(records)]
        nid = str(nxt["image_id"])
        results.append(Hits(
            qid=f"coco:{r['image_id']}", hits=[Hit(did=f"img:{nid}", score=0.9, modality="image")],
            pairs=[Pair(image_did=f"img:{nid}", text_did=f"txt:{nid}", img_path=nxt["image"], txt=nxt["captions"][1],
                        score=0.9, via="pairing")]))
    (tmp / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (tmp / "pool.jsonl").write_text("".join(json.dumps(c) + "\n" for c in pool), encoding="utf-8")
    write_retrieval_run(tmp / "run.jsonl", results)
    return T2IData(root=coco_mini, queries=tmp / "queries.jsonl", pool=tmp / "pool.jsonl", run=tmp / "run.jsonl",
                   records=records)


@pytest.fixture(scope="session")
def tiny_sd_dir() -> Path:
    """A tiny random StableDiffusionPipeline directory (about 350 kB; 2 steps at 32x32 take ~0.1 s)."""
    from tiny_models import tiny_sd_dir as build

    return build()
