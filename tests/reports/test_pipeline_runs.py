"""Evaluate and report runs written by the real generation commands (nested manifest, task names).

The offline retrieval baselines (``retrieval:top1``) need no model, so ``unirag caption`` and
``unirag generate-images`` run here for real on COCO photos, from a small hand-written retrieval run.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from eval_run_factory import coco_rows, write_caption_task, write_image_task
from injected_features import PooledColour

from unirag.cli.main import cli
from unirag.metrics.captions import evaluate_caption_run
from unirag.metrics.image_run import evaluate_image_run
from unirag.reports.build import build_report
from unirag.reports.collect import summarize_run


def _retrieval_file(path, rows, qid_prefix, k=2):
    """Each query retrieves the pairs of the next k images (never its own)."""
    with path.open("w") as f:
        for i, r in enumerate(rows):
            pairs = []
            for j in range(1, k + 1):
                o = rows[(i + j) % len(rows)]
                pairs.append({"image_did": f"9:{o['image_id']}-img", "text_did": f"9:{o['image_id']}-1",
                              "img_path": o["image"], "txt": o["captions"][1], "score": 1.0 / j, "via": "pairing"})
            cands = [{"did": p["text_did"], "score": p["score"], "modality": "text"} for p in pairs]
            f.write(json.dumps({"qid": f"{qid_prefix}{r['image_id']}", "candidates": cands, "pairs": pairs}) + "\n")
    return path


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory, coco_mini):
    tmp = tmp_path_factory.mktemp("pipe")
    rows = coco_rows(coco_mini, 6)
    q_i2t, pool = write_caption_task(tmp, rows)
    q_t2i, pool_img = write_image_task(tmp, rows)
    ret_dir = tmp / "clip-sf"
    ret_dir.mkdir()
    r_i2t = _retrieval_file(ret_dir / "mscoco_i2t.jsonl", rows, "9:")
    r_t2i = _retrieval_file(ret_dir / "mscoco_t2i.jsonl", rows, "t:")
    runner = CliRunner()
    cap = runner.invoke(cli, ["caption", "--queries", str(q_i2t), "--images-root", str(coco_mini), "--generator",
                              "retrieval:top1", "--mode", "rag", "--k", "1", "--retrieval", str(r_i2t), "--out",
                              str(tmp / "cap"), "--no-progress"])
    assert cap.exit_code == 0, cap.output
    img = runner.invoke(cli, ["generate-images", "--queries", str(q_t2i), "--pool-images-root", str(coco_mini),
                              "--generator", "retrieval:top1", "--mode", "rag", "--k", "1", "--retrieval", str(r_t2i),
                              "--out", str(tmp / "img"), "--no-progress"])
    assert img.exit_code == 0, img.output
    cap_metrics = evaluate_caption_run(tmp / "cap", q_i2t, pool, meteor=False)
    img_metrics = evaluate_image_run(tmp / "img", q_t2i, pool_img, coco_mini, fid_feature=PooledColour(),
                                     is_feature=PooledColour(), clip_model=None, is_splits=2, device="cpu")
    return tmp, rows, cap_metrics, img_metrics


def _cider_by_hand(candidates: dict[str, str], references: dict[str, list[str]]) -> float:
    """pycocoevalcap run directly, as COCOEvalCap.evaluate does (no unirag code): x100. (pycocoevalcap 1.2,
    ``eval.py`` lines 32-34: PTBTokenizer on references and candidates, then the scorers of lines 40-45;
    castorini/UniRAG ``src/unirag/eval_caption_generation.py`` at commit 0a6e6a36 does the same, lines 83-104.)"""
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tok = PTBTokenizer()
    gts = tok.tokenize({k: [{"caption": c} for c in v] for k, v in references.items()})
    res = tok.tokenize({k: [{"caption": c}] for k, c in candidates.items()})
    score, _ = Cider().compute_score(gts, res)
    return 100 * float(score)


def test_pipeline_runs_are_scored(pipeline_runs):
    tmp, rows, cap_metrics, img_metrics = pipeline_runs
    assert cap_metrics["n_scored"] == 6 and cap_metrics["n_failed"] == 0
    # retrieval:top1 answers query i with the caption of its top pair: image i+1's second caption
    outputs = {r["qid"]: r["caption"] for r in map(json.loads, (tmp / "cap" / "outputs.jsonl").read_text().splitlines())}
    expected = {f"9:{r['image_id']}": rows[(i + 1) % 6]["captions"][1] for i, r in enumerate(rows)}
    assert outputs == expected
    # scored against each image's own references (captions[1:]), exactly as pycocoevalcap scores it
    cider = _cider_by_hand(expected, {f"9:{r['image_id']}": r["captions"][1:] for r in rows})
    assert cap_metrics["metrics"]["CIDEr"] == pytest.approx(cider, abs=1e-9)
    assert 1 < cider < 60  # another image's caption: far below the human fixture's CIDEr (94.6)
    # each query 'generates' another query's photo: the same set of images, so FID (a distance between
    # sets) is 0 although every single pair is wrong
    assert img_metrics["n_scored"] == 6 and img_metrics["metrics"]["FID"] == pytest.approx(0.0, abs=1e-6)


def test_labels_from_the_nested_manifests(pipeline_runs):
    tmp, *_ = pipeline_runs
    cap, img = summarize_run(tmp / "cap"), summarize_run(tmp / "img")
    assert (cap.task, cap.mode, cap.k, cap.label) == ("caption", "retrieval", 1, "mscoco_i2t (top1)")
    assert (img.task, img.mode, img.k, img.label) == ("image", "retrieval", 1, "mscoco_t2i (top1)")


def test_report_of_pipeline_runs(pipeline_runs, coco_mini):
    tmp, rows, *_ = pipeline_runs
    out = tmp / "report"
    written = build_report([tmp / "cap", tmp / "img"], out)
    assert written["cards"] == {"cap": 6, "img": 6}
    html = (out / "gallery" / "cap.html").read_text()
    assert rows[1]["captions"][1] in html  # query 0's in-context example, taken from the run's records
    md = (out / "tables.md").read_text()
    assert "| mscoco_i2t (top1) | 1 |" in md and "| mscoco_t2i (top1) | 1 |" in md
