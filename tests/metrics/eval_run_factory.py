"""Small real M-BEIR tasks and generation run directories for evaluation/report tests.

Built from the real COCO val2017 mini set: image->text queries whose references are four human
captions, text->image queries whose positive is the photo, and run directories in the format the
generation commands write (``outputs.jsonl`` + ``manifest.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unirag.data.mbeir import write_candidates, write_queries
from unirag.data.records import Candidate, Modality, Query


def coco_rows(coco_mini: Path, n: int) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines() if x.strip()]
    rows.sort(key=lambda r: r["image_id"])
    return rows[:n]


def write_caption_task(out: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    """Image queries ``9:<image_id>``; references = captions[1:] (captions[0] is kept as a 'candidate')."""
    queries, pool = [], []
    for r in rows:
        iid = str(r["image_id"])
        dids = [f"9:{iid}-{j}" for j in range(1, len(r["captions"]))]
        pool += [Candidate(did=d, modality=Modality.TEXT, txt=c, source_id=iid)
                 for d, c in zip(dids, r["captions"][1:], strict=True)]
        pool.append(Candidate(did=f"9:{iid}-img", modality=Modality.IMAGE, img_path=r["image"], source_id=iid))
        queries.append(Query(qid=f"9:{iid}", modality=Modality.IMAGE, img_path=r["image"], pos_cand_list=dids,
                             task_id=3))
    write_queries(out / "queries_i2t.jsonl", queries)
    write_candidates(out / "pool.jsonl", pool)
    return out / "queries_i2t.jsonl", out / "pool.jsonl"


def write_image_task(out: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    """Caption queries ``t:<image_id>`` (first caption) whose positive is the photo."""
    queries = [Query(qid=f"t:{r['image_id']}", modality=Modality.TEXT, txt=r["captions"][0],
                     pos_cand_list=[f"9:{r['image_id']}-img"], task_id=0) for r in rows]
    pool = [Candidate(did=f"9:{r['image_id']}-img", modality=Modality.IMAGE, img_path=r["image"],
                      source_id=str(r["image_id"])) for r in rows]
    write_queries(out / "queries_t2i.jsonl", queries)
    write_candidates(out / "pool_images.jsonl", pool)
    return out / "queries_t2i.jsonl", out / "pool_images.jsonl"


def write_run(run_dir: Path, records: list[dict[str, Any]], manifest: dict[str, Any]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "outputs.jsonl").open("w", encoding="utf-8") as f:
        for rec in records:
            base = {"status": "ok", "error": None, "examples": [], "latency_s": 0.5, "usage": {},
                    "cost_usd": 0.0, "attempts": 1}
            f.write(json.dumps({**base, **rec}, ensure_ascii=False) + "\n")
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return run_dir


def example(row: dict[str, Any]) -> dict[str, Any]:
    """A few-shot pair as the generation runs record it."""
    iid = row["image_id"]
    return {"image_did": f"9:{iid}-img", "text_did": f"9:{iid}-1", "img_path": row["image"], "txt": row["captions"][1]}
