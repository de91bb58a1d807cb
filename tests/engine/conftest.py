"""Small real-image inputs for the engine tests (their Ray cluster is the run's one ``ray_cluster``,
tests/conftest.py): COCO photos as caption queries with a retrieval run of example pairs, and
their captions as text-to-image queries."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))  # engine_plugins, tiny_models

from unirag.data.mbeir import write_candidates, write_queries  # noqa: E402
from unirag.data.records import Candidate, Modality, Query  # noqa: E402


@pytest.fixture(scope="session")
def coco_caption_set(coco_mini: Path, tmp_path_factory) -> dict:
    """n image queries, a pool of their photos and first captions, and a run whose pairs for query i are
    the photos of queries i+1 and i+2 (so each prompt carries two example pairs)."""
    n = 16
    rows = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines() if x.strip()][:n]
    out = tmp_path_factory.mktemp("engine_coco")
    pool, queries, lines = [], [], []
    for r in rows:
        sid = str(r["image_id"])
        pool.append(Candidate(did=f"img{sid}", modality=Modality.IMAGE, img_path=r["image"], source_id=sid))
        pool.append(Candidate(did=f"txt{sid}", modality=Modality.TEXT, txt=r["captions"][0], source_id=sid))
        queries.append(Query(qid=f"q{sid}", modality=Modality.IMAGE, img_path=r["image"], pos_cand_list=[f"txt{sid}"]))
    for i, r in enumerate(rows):
        pairs = []
        for d in (1, 2):
            o = rows[(i + d) % n]
            pairs.append({"image_did": f"img{o['image_id']}", "text_did": f"txt{o['image_id']}", "img_path": o["image"],
                          "txt": o["captions"][0], "score": 1.0 - d / 10, "via": "pairing"})
        cands = [{"did": p["text_did"], "score": p["score"], "modality": "text"} for p in pairs]
        lines.append(json.dumps({"qid": f"q{r['image_id']}", "candidates": cands, "pairs": pairs}))
    write_candidates(out / "pool.jsonl", pool)
    write_queries(out / "queries.jsonl", queries)
    (out / "run.jsonl").write_text("\n".join(lines) + "\n")
    text_queries = [Query(qid=f"t{r['image_id']}:{j}", modality=Modality.TEXT, txt=c, pos_cand_list=[f"img{r['image_id']}"])
                    for r in rows for j, c in enumerate(r["captions"][:2])]
    write_queries(out / "text_queries.jsonl", text_queries)
    return {"queries": out / "queries.jsonl", "pool": out / "pool.jsonl", "run": out / "run.jsonl",
            "text_queries": out / "text_queries.jsonl", "images_root": coco_mini, "rows": rows, "n": n,
            "n_text": len(text_queries)}

