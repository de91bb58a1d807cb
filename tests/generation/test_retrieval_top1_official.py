"""retrieval:top1 is the official UniRAG retriever baseline: the top candidate's caption, never skipped.

Official definition (castorini/UniRAG ``src/unirag/eval_caption_generation.py`` at commit 0a6e6a36,
``--calculate_retriever_metrics``, lines 142-165): ``caption = obj["candidates"][0]["txt"]`` (line 151) or
else ``obj["complement_candidates"][0]["txt"]`` (lines 154-158), else an empty caption (line 164) - no check
whether the top hit is the query image's own caption.
"""

from __future__ import annotations

import json

from unirag.pipelines.caption import CaptionConfig, run_captioning


def _run_with_own_caption_on_top(coco_set, path):
    """Query i's top hit is its own first caption (its pair dropped, as the retriever does: the pair would
    show the query image); then the pairs of the conftest run (other images)."""
    lines = []
    for line in coco_set["run"].read_text().splitlines():
        rec = json.loads(line)
        sid = rec["qid"][1:]
        rec["candidates"].insert(0, {"did": f"txt{sid}_0", "score": 2.0, "modality": "text"})
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def _captions(out):
    return {r["qid"]: r for r in map(json.loads, (out / "outputs.jsonl").read_text().splitlines())}


def test_top1_outputs_the_top_candidate_even_when_it_is_the_query_images_own_caption(coco_set, tmp_path):
    run = _run_with_own_caption_on_top(coco_set, tmp_path / "run.jsonl")
    cfg = dict(queries=coco_set["queries"], generator="retrieval:top1", mode="rag", k=1, retrieval=run,
               images_root=coco_set["images_root"], progress=False)
    run_captioning(CaptionConfig(out=tmp_path / "top1", pool=coco_set["pool"], **cfg))
    rows = coco_set["rows"]
    got = _captions(tmp_path / "top1")
    assert {q: r["caption"] for q, r in got.items()} == {f"q{r['image_id']}": r["captions"][0] for r in rows}
    # The few-shot examples still never show the query itself: the example is the next image's pair.
    assert all(r["examples"][0]["txt"] == rows[(i + 1) % len(rows)]["captions"][0]
               for i, r in enumerate(got[f"q{x['image_id']}"] for x in rows))
    # Without the pool the dropped pair's caption cannot be looked up: each query fails, saying so.
    run_captioning(CaptionConfig(out=tmp_path / "nopool", **cfg))
    failed = _captions(tmp_path / "nopool")
    assert all(r["status"] == "error" and "--pool" in r["error"] for r in failed.values())


def test_top1_takes_an_image_candidates_complement_caption(coco_set, tmp_path):
    """The top hit is an image (wrong modality for captioning): its complement's caption is the output."""
    rows = coco_set["rows"]
    lines = []
    for line in coco_set["run"].read_text().splitlines():
        rec = json.loads(line)
        first = rec["pairs"][0]
        rec["candidates"][0] = {"did": first["image_did"], "score": 1.0, "modality": "image"}
        lines.append(json.dumps(rec))
    run = tmp_path / "img_run.jsonl"
    run.write_text("\n".join(lines) + "\n")
    run_captioning(CaptionConfig(queries=coco_set["queries"], generator="retrieval:top1", mode="rag", k=1,
                                 retrieval=run, images_root=coco_set["images_root"], out=tmp_path / "o",
                                 progress=False))
    got = _captions(tmp_path / "o")
    assert [got[f"q{r['image_id']}"]["caption"] for r in rows] == [rows[(i + 1) % len(rows)]["captions"][0]
                                                                   for i in range(len(rows))]
