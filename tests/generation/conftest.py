"""Real COCO images and captions turned into M-BEIR files (queries, pool, a retrieval run) for generation tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fake_openai_server, tiny_models

from unirag.data.mbeir import write_candidates, write_queries  # noqa: E402
from unirag.data.records import Candidate, Modality, Query  # noqa: E402


def coco_rows(coco_mini: Path, n: int) -> list[dict]:
    rows = [json.loads(line) for line in (coco_mini / "captions.jsonl").read_text().splitlines() if line.strip()]
    return rows[:n]


def build_coco_mbeir(coco_mini: Path, out: Path, n: int = 12) -> dict[str, Path]:
    """n image queries (positives: their 5 captions), a pool with images + captions, and a run file whose
    pairs for query i are the next images (i+1, i+2, ...) with their first caption."""
    rows = coco_rows(coco_mini, n)
    pool, queries = [], []
    for r in rows:
        sid = str(r["image_id"])
        pool.append(Candidate(did=f"img{sid}", modality=Modality.IMAGE, img_path=r["image"], source_id=sid))
        caps = []
        for j, c in enumerate(r["captions"]):
            did = f"txt{sid}_{j}"
            caps.append(did)
            pool.append(Candidate(did=did, modality=Modality.TEXT, txt=c, source_id=sid))
        queries.append(Query(qid=f"q{sid}", modality=Modality.IMAGE, img_path=r["image"], pos_cand_list=caps))
    out.mkdir(parents=True, exist_ok=True)
    write_candidates(out / "pool.jsonl", pool)
    write_queries(out / "queries.jsonl", queries)
    lines = []
    for i, r in enumerate(rows):
        pairs = []
        for d in range(1, 6):
            o = rows[(i + d) % len(rows)]
            pairs.append({"image_did": f"img{o['image_id']}", "text_did": f"txt{o['image_id']}_0",
                          "img_path": o["image"], "txt": o["captions"][0], "score": 1.0 - d / 10, "via": "pairing"})
        cands = [{"did": p["text_did"], "score": p["score"], "modality": "text"} for p in pairs]
        lines.append(json.dumps({"qid": f"q{r['image_id']}", "candidates": cands, "pairs": pairs}))
    (out / "run.jsonl").write_text("\n".join(lines) + "\n")
    return {"queries": out / "queries.jsonl", "pool": out / "pool.jsonl", "run": out / "run.jsonl",
            "images_root": coco_mini, "rows": rows}


@pytest.fixture(scope="module")
def coco_set(coco_mini: Path, tmp_path_factory) -> dict:
    return build_coco_mbeir(coco_mini, tmp_path_factory.mktemp("coco_mbeir"))
