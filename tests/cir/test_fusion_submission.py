"""RRF, normalisation and re-ranking arithmetic; test-server submission formats."""

import json

import numpy as np
import pytest

from unirag.cir.outputs import circo_submission, write_submissions
from unirag.cir.scoring import aggregate_similarity, normalise, ranks, rerank_scores, rrf
from unirag.errors import InputError


def test_aggregation_sums_within_imagined_caption_modality():
    s_t, s_v = aggregate_similarity(np.array([1.0]), np.array([2.0]), np.array([10.0]), np.array([20.0]))
    assert (s_t[0], s_v[0]) == (11.0, 22.0)  # S^t = s_t^t + s_v^t, S^v = s_t^v + s_v^v
    s_t, s_v = aggregate_similarity(None, None, np.array([10.0]), np.array([20.0]))
    assert (s_t[0], s_v[0]) == (10.0, 20.0)
    with pytest.raises(ValueError):
        aggregate_similarity(None, None, None, None)


def test_rrf_uses_one_based_ranks_and_k_60():
    """Ranks from 1 and k = 60, as the official X^R fusion (01yzzyu/xr.github.io@cf44a37
    XR/xr.py:536-537, ``1.0 / (k_rrf + r)`` with ``enumerate(names, start=1)``; :1543 --rrf_k 60)."""
    assert list(ranks([0.2, 0.9, 0.2])) == [2, 1, 3]  # tie: earlier index first
    fused = rrf([3.0, 1.0, 2.0], [1.0, 3.0, 2.0])
    assert fused == pytest.approx([1 / 61 + 1 / 63, 1 / 63 + 1 / 61, 2 / 62])
    assert rrf([1.0, 0.0], k=1) == pytest.approx([1 / 2, 1 / 3])


def test_rerank_and_normalise():
    assert normalise([2.0, 4.0, 3.0]) == pytest.approx([0, 1, 0.5])
    assert normalise([5.0, 5.0]) == pytest.approx([1, 1])
    assert normalise([5.0, 1.0], "none") == pytest.approx([5, 1])
    # (1 + 2) * (.25 * 1 + .75 * 0) and (0 + 1) * (.25 * 0 + .75 * 1)
    assert rerank_scores([1, 0], [2, 1], [4.0, 2.0], [1.0, 3.0], lam=0.25) == pytest.approx([0.75, 0.75])
    with pytest.raises(ValueError):
        rerank_scores([1], [1], [1.0], [1.0], lam=1.5)


def test_submission_formats(tmp_path):
    """CIRR: ``version`` rc2, ``metric`` recall (top 50) / recall_subset (top 3), as the official X^R
    code writes them (01yzzyu/xr.github.io@cf44a37 XR/xr.py:1282-1292); CIRCO: the top 50 ids, here as
    integers (the official code writes strings: ".jpg" and leading zeros stripped, :1299-1303)."""
    ranks50 = {"0": [str(i) for i in range(60)]}
    assert circo_submission(ranks50) == {"0": list(range(50))}
    with pytest.raises(InputError, match="50 results"):
        circo_submission({"0": ["1"]})
    names = {"12063": [f"test1-{i}" for i in range(50)]}
    paths = write_submissions("cirr", tmp_path, names, {"12063": ["a", "b", "c", "d"]})
    recall = json.loads(paths[0].read_text())
    subset = json.loads(paths[1].read_text())
    assert recall["version"] == "rc2" and recall["metric"] == "recall" and len(recall["12063"]) == 50
    assert subset["metric"] == "recall_subset" and subset["12063"] == ["a", "b", "c"]
    assert write_submissions("fashioniq", tmp_path, names) == []
