"""CIR metrics on hand-computed cases (CIRCO mAP@k, CIRR R_subset@k, R@k)."""

import math

import pytest

from unirag.metrics.cir import (
    average_precision_at_k,
    map_mean,
    recall_at_k,
    recall_mean,
    recall_subset_mean,
    subset_ranking,
)

RANKING = ["a", "x", "b", "y", "c", "z"]


def test_average_precision_divides_by_min_k_and_ground_truths():
    gts = ["a", "b", "c", "d"]
    # hits at ranks 1, 3, 5 -> precisions 1/1, 2/3, 3/5
    assert average_precision_at_k(RANKING, gts, 5) == pytest.approx((1 + 2 / 3 + 3 / 5) / 4)
    # k=3 < 4 ground truths: divide by 3
    assert average_precision_at_k(RANKING, gts, 3) == pytest.approx((1 + 2 / 3) / 3)
    # two ground truths, both found: divide by 2
    assert average_precision_at_k(RANKING, ["a", "b"], 10) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision_at_k(RANKING, ["q"], 5) == 0.0
    assert average_precision_at_k(["t"], ["t"], 50) == 1.0


def test_map_mean_is_percent_over_queries_with_ground_truth():
    rankings = {"1": ["a", "b"], "2": ["x", "a"], "3": ["a"]}
    targets = {"1": ["a"], "2": ["a"], "3": []}  # query 3 (no gt) is not counted
    m = map_mean(rankings, targets, ks=(5,))
    assert m["mAP@5"] == pytest.approx(100 * (1.0 + 0.5) / 2)


def test_recall_at_k_any_target():
    assert recall_at_k(RANKING, ["b"], 2) == 0.0
    assert recall_at_k(RANKING, ["b"], 3) == 1.0
    assert recall_at_k(RANKING, ["q", "y"], 4) == 1.0
    r = recall_mean({"1": RANKING, "2": ["z"]}, {"1": ["c"], "2": ["c"]}, ks=(1, 5))
    assert r == {"R@1": 0.0, "R@5": 50.0}
    with pytest.raises(ValueError):
        recall_at_k(RANKING, [], 1)
    with pytest.raises(ValueError):
        recall_at_k(RANKING, ["a"], 0)


def test_recall_subset_restricts_to_image_set_without_reference():
    ranking = ["r", "t1", "m1", "x", "t", "m2"]
    members = ["r", "m1", "m2", "t"]
    assert subset_ranking(ranking, members, "r") == ["m1", "t", "m2"]
    assert recall_at_k(subset_ranking(ranking, members, "r"), ["t"], 1) == 0.0
    assert recall_at_k(subset_ranking(ranking, members, "r"), ["t"], 2) == 1.0
    m = recall_subset_mean({"q1": ranking, "q2": ["t", "r"]}, {"q1": "t", "q2": "t"},
                           {"q1": members, "q2": ["t", "r"]}, {"q1": "r", "q2": "r"}, ks=(1, 2))
    assert m == {"R_subset@1": 50.0, "R_subset@2": 100.0}


def test_empty_query_set_gives_nan():
    assert math.isnan(recall_mean({}, {}, ks=(1,))["R@1"])
