"""What the bundled sample's pipeline writes, summarised: the reference a refactor is checked against.

Issue 25 ("one way to do each thing") changes how the core is built, not what it does. This module
runs the README's command chain on the bundled sample in-process (import -> index build ->
retrieve -> caption rag/random -> generate-images with the offline top-1 baseline) and reduces
every file that matters to plain JSON:

* index vectors: per row, its norm and its projection on 8 fixed random directions (the vectors
  themselves are 4 MB; identical vectors give identical projections);
* retrieval run: each query's ranked candidate dids, scores and pair dids;
* caption and image runs: each record's caption/examples/source, without timings.

``tests/fixtures/golden/sample.json`` was written by ``python tests/golden_outputs.py --write`` at
commit 96285da (before the issue-25 refactor); ``tests/test_behaviour_unchanged.py`` reruns the
chain and compares. Rewrite the file only for an intended behaviour change, and say so in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden" / "sample.json"
SAMPLE = Path(__file__).resolve().parents[1] / "src" / "unirag" / "demo" / "data"
#: caption / image queries run (the first N of each file): enough to cover ties, random draws and pairs
CAPTION_QUERIES = 12
IMAGE_QUERIES = 12


def _cli(*args: str) -> None:
    from unirag.cli.main import main

    try:
        main([*args])
    except SystemExit as e:
        if e.code:
            raise AssertionError(f"unirag {' '.join(args)} exited {e.code}") from None


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _vectors(index_dir: Path) -> dict[str, list]:
    import faiss

    out = {}
    rng = np.random.default_rng(0)
    for f in sorted(index_dir.glob("data-*/*.faiss")):
        index = faiss.read_index(str(f))
        vecs = index.reconstruct_n(0, index.ntotal)
        directions = rng.standard_normal((vecs.shape[1], 8)).astype(np.float64)
        proj = vecs.astype(np.float64) @ directions
        out[f.name] = [[round(float(np.linalg.norm(v)), 5), *(round(float(x), 4) for x in p)]
                       for v, p in zip(vecs, proj, strict=True)]
    return out


def _run(path: Path) -> list[dict]:
    return [{"qid": r["qid"],
             "candidates": [[c["did"], round(c["score"], 4), c.get("replaced")] for c in r["candidates"]],
             "pairs": [[p["image_did"], p["text_did"], p.get("via")] for p in r["pairs"]]}
            for r in _jsonl(path)]


def _records(path: Path, keep: tuple[str, ...]) -> list[dict]:
    rows = sorted(_jsonl(path), key=lambda r: r["qid"])
    return [{k: r.get(k) for k in ("qid", *keep)} for r in rows]


def produce(work: Path) -> dict:
    """Run the chain in ``work`` (a fresh folder) and return the summary."""
    import os

    s = str(SAMPLE)
    old = Path.cwd()
    os.chdir(work)
    try:
        _cli("import", "coco", "--captions", f"{s}/captions.json", "--images", f"{s}/images", "--out", "data")
        _cli("index", "build", "--pool", "data/pool.jsonl", "--images-root", f"{s}/images", "--out", "index")
        _cli("retrieve", "--index", "index", "--queries", "data/queries_task3_image2text.jsonl",
             "--images-root", f"{s}/images", "--k", "5", "--modality", "text",
             "--exclude-positives", "data/qrels_task3.txt", "--out", "i2t.jsonl")
        _cli("retrieve", "--index", "index", "--queries", "data/queries_task0_text2image.jsonl",
             "--k", "2", "--modality", "image", "--exclude-positives", "data/qrels_task0.txt", "--out", "t2i.jsonl")
        _cli("caption", "--queries", "data/queries_task3_image2text.jsonl", "--images-root", f"{s}/images",
             "--mode", "rag", "--k", "5", "--generator", "retrieval:consensus", "--retrieval", "i2t.jsonl",
             "--pool", "data/pool.jsonl", "--out", "cap-rag", "--limit", str(CAPTION_QUERIES), "--no-progress")
        _cli("caption", "--queries", "data/queries_task3_image2text.jsonl", "--images-root", f"{s}/images",
             "--mode", "random", "--k", "2", "--generator", "retrieval:consensus",
             "--pool", "data/pool.jsonl", "--out", "cap-random", "--limit", str(CAPTION_QUERIES), "--no-progress")
        _cli("generate-images", "--queries", "data/queries_task0_text2image.jsonl", "--pool-images-root", f"{s}/images",
             "--generator", "retrieval:top1", "--mode", "rag", "--k", "2", "--retrieval", "t2i.jsonl",
             "--pool", "data/pool.jsonl", "--out", "gen-top1", "--limit", str(IMAGE_QUERIES), "--no-progress")
        return {
            "vectors": _vectors(work / "index"),
            "retrieve_i2t": _run(work / "i2t.jsonl"),
            "retrieve_t2i": _run(work / "t2i.jsonl")[:IMAGE_QUERIES * 2],
            "caption_rag": _records(work / "cap-rag" / "outputs.jsonl", ("status", "caption", "examples", "error", "raw")),
            "caption_random": _records(work / "cap-random" / "outputs.jsonl", ("status", "caption", "examples", "error", "raw")),
            "images_top1": [_image_record(work / "gen-top1", r) for r in _jsonl(work / "gen-top1" / "outputs.jsonl")],
        }
    finally:
        os.chdir(old)


def _image_record(run: Path, rec: dict) -> dict:
    """An image-run record without timings or machine paths; the picture as a hash of its pixels."""
    import hashlib

    from PIL import Image

    digest = None
    if rec.get("image"):
        with Image.open(run / rec["image"]) as im:
            digest = hashlib.sha256(np.asarray(im.convert("RGB")).tobytes()).hexdigest()[:16]
    meta = rec.get("meta") or {}
    return {"qid": rec["qid"], "status": rec["status"], "error": rec.get("error"), "caption": rec.get("caption"),
            "examples": rec.get("examples"), "size": rec.get("size"), "near_duplicates": rec.get("near_duplicates"),
            "source": meta.get("source"), "source_file": Path(meta["source_path"]).name if meta.get("source_path")
            else None, "pixels": digest}


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/golden_outputs.py --write")
    with tempfile.TemporaryDirectory() as tmp:
        summary = produce(Path(tmp))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(summary, indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
