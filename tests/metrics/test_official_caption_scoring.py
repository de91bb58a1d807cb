"""Caption scoring under ``official``: a failed call is an empty caption, only ``Caption [n]: `` is stripped."""

from __future__ import annotations

import json

import pytest
from eval_run_factory import coco_rows, write_caption_task, write_run

from unirag.metrics.captions import evaluate_caption_run
from unirag.metrics.text_normalize import strip_official_prefix


@pytest.fixture
def run(tmp_path, coco_mini):
    rows = coco_rows(coco_mini, 4)
    queries, pool = write_caption_task(tmp_path, rows)
    caps = [r["captions"][0] for r in rows]
    records = [
        {"qid": f"9:{rows[0]['image_id']}", "caption": f"  Caption [2]: {caps[0]}"},
        {"qid": f"9:{rows[1]['image_id']}", "caption": f"**Answer:** {caps[1]}"},
        {"qid": f"9:{rows[2]['image_id']}", "caption": f'"{caps[2]}"'},
        {"qid": f"9:{rows[3]['image_id']}", "status": "error", "error": "RateLimitError", "caption": None},
    ]
    out = write_run(tmp_path / "run", records, {"task": "caption", "identity": {"k": 1}})
    return out, queries, pool, rows, caps


def _scored(out) -> dict[str, str]:
    return {r["qid"]: r["caption_scored"] for r in map(json.loads, (out / "metrics_per_query.jsonl").read_text()
                                                       .splitlines())}


def test_official_scores_a_failed_call_as_empty_and_strips_only_the_caption_label(run):
    """castorini/UniRAG src/unirag/caption_generation_inference.py@e9a4e00:90-92 (Gemini) and :189-200 (GPT)
    store ``output = ""`` for a call that failed, and eval_caption_generation.py@e9a4e00:59-65
    (``remove_caption_prefix``: ``str.strip()`` then ``^Caption \\[\\d+\\]: ``) is the only clean-up (:77-79)."""
    out, queries, pool, rows, caps = run
    result = evaluate_caption_run(out, queries, pool, meteor=False, profile="official")
    assert result["n_scored"] == 4 and result["n_failed"] == 1 and result["n_failed_scored_empty"] == 1
    scored = _scored(out)
    assert scored == {f"9:{rows[0]['image_id']}": caps[0], f"9:{rows[1]['image_id']}": f"**Answer:** {caps[1]}",
                      f"9:{rows[2]['image_id']}": f'"{caps[2]}"', f"9:{rows[3]['image_id']}": ""}


def test_default_excludes_failed_queries_and_strips_answer_labels(run):
    out, queries, pool, rows, caps = run
    result = evaluate_caption_run(out, queries, pool, meteor=False)
    assert result["n_scored"] == 3 and result["n_failed_scored_empty"] == 0
    assert _scored(out) == {f"9:{rows[i]['image_id']}": caps[i] for i in range(3)}


def test_official_prefix_rule_is_the_exact_regex():
    """eval_caption_generation.py@e9a4e00:61: ``^Caption \\[\\d+\\]: ``, case and spacing exact."""
    assert strip_official_prefix(" Caption [12]: A dog. ") == "A dog."
    assert strip_official_prefix("caption [1]: A dog.") == "caption [1]: A dog."
    assert strip_official_prefix("Caption [1]:A dog.") == "Caption [1]:A dog."
    assert strip_official_prefix("Caption: A dog.") == "Caption: A dog."
