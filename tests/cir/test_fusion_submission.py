"""RRF, normalisation and re-ranking arithmetic; test-server submission formats."""

import json

import numpy as np
import pytest

from unirag.cir.config import load_config
from unirag.cir.outputs import write_submissions
from unirag.cir.scoring import CoarseResult, coarse, fine, normalise, ranks, rrf
from unirag.errors import ConfigError, InputError


def test_aggregation_sums_within_imagined_caption_modality():
    one = np.array([[1.0]])  # one candidate whose caption and image embeddings are both [1]
    c_t, c_v, x_t, x_v = np.array([1.0]), np.array([2.0]), np.array([10.0]), np.array([20.0])
    res = coarse(one, one, c_t, c_v, x_t, x_v)
    assert (res.s_t[0], res.s_v[0]) == (11.0, 22.0)  # S^t = s_t^t + s_v^t, S^v = s_t^v + s_v^v
    res = coarse(None, one, c_t, c_v, x_t, x_v)
    assert (res.s_t[0], res.s_v[0]) == (10.0, 20.0)
    with pytest.raises(ValueError):
        coarse(None, None, c_t, c_v, x_t, x_v)


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
    s_t, s_v = np.array([4.0, 2.0]), np.array([1.0, 3.0])
    top, final = fine(np.array([0, 1]), CoarseResult(s_t, s_v, s_t, np.array([0, 1])), np.array([1, 0]),
                      np.array([2, 1]), lam=0.25)
    assert final == pytest.approx([0.75, 0.75]) and list(top) == [0, 1]  # a tie keeps the coarse order
    with pytest.raises(ConfigError, match="lambda"):
        load_config(None, lam=1.5)


def test_submission_formats(tmp_path):
    """CIRR: ``version`` rc2, ``metric`` recall (top 50) / recall_subset (top 3), as the official X^R
    code writes them (01yzzyu/xr.github.io@cf44a37 XR/xr.py:1282-1292); CIRCO: the top 50 ids, here as
    integers (the official code writes strings: ".jpg" and leading zeros stripped, :1299-1303)."""
    ranks50 = {"0": [str(i) for i in range(60)]}
    (circo,) = write_submissions("circo", tmp_path, ranks50)
    assert circo.name == "submission_circo.json" and json.loads(circo.read_text()) == {"0": list(range(50))}
    with pytest.raises(InputError, match="CIRCO submission needs 50 results"):
        write_submissions("circo", tmp_path, {"0": ["1"]})
    with pytest.raises(InputError, match="CIRR submission needs 50 results"):
        write_submissions("cirr", tmp_path, {"0": ["1"]})
    names = {"12063": [f"test1-{i}" for i in range(50)]}
    paths = write_submissions("cirr", tmp_path, names, {"12063": ["a", "b", "c", "d"]})
    recall = json.loads(paths[0].read_text())
    subset = json.loads(paths[1].read_text())
    assert recall["version"] == "rc2" and recall["metric"] == "recall" and len(recall["12063"]) == 50
    assert subset["metric"] == "recall_subset" and subset["12063"] == ["a", "b", "c"]
    assert write_submissions("fashioniq", tmp_path, names) == []


def test_cirr_average_interval_resamples_the_queries_that_have_both():
    """The CIRR average (R@5 + R_subset@1) / 2 gets its interval from the queries with both values (a query
    without an image set has no R_subset@1), each metric's own from all its queries."""
    from unirag.cir.datasets import CirDataset, CirQuery
    from unirag.cir.outputs import evaluate
    from unirag.metrics.stats import bootstrap_interval

    # 12 queries, the first 8 with an image set; R@5 hits 2 queries in 3, R_subset@1 every other query
    queries = [CirQuery(f"q{i}", "ref", "t", [f"t{i}"], [f"t{i}", "x", "y"] if i < 8 else None) for i in range(12)]
    rankings = {q.qid: ([q.targets[0]] if i % 3 else []) + ["x", "y", "z"] for i, q in enumerate(queries)}
    subsets = {q.qid: (["t" + q.qid[1:], "x"] if i % 2 else ["x", "t" + q.qid[1:]]) for i, q in enumerate(queries[:8])}
    ds = CirDataset("cirr-val", "cirr", queries, {})
    out = evaluate(ds, rankings, subsets, resamples=300, bootstrap_seed=4)
    r5 = [100.0 * (i % 3 != 0) for i in range(12)]
    sub = [100.0 * (i % 2) for i in range(8)]
    assert out["R@5"] == pytest.approx(sum(r5) / 12) and out["R_subset@1"] == pytest.approx(sum(sub) / 8)
    pairs = np.array([[r5[i], sub[i]] for i in range(8)])
    want = bootstrap_interval(pairs, lambda r: r.mean(axis=-2).mean(axis=-1), n_resamples=300, seed=4)
    got = out["intervals"]["avg(R@5,R_subset@1)"]
    assert (got["low"], got["high"], got["se"]) == pytest.approx((want.low, want.high, want.se), abs=1e-9)
    assert out["intervals"]["R@5"] == bootstrap_interval(r5, n_resamples=300, seed=4).as_dict()
