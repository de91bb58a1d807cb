"""hit@k, recall@k, MRR@k on hand-computed cases."""

from __future__ import annotations

import pytest

from unirag.metrics.retrieval import evaluate_run, hit_at_k, mrr_at_k, recall_at_k


def test_single_query_metrics() -> None:
    ranked = ["a", "x", "b", "y", "c"]
    relevant = {"b", "c", "z"}
    assert [hit_at_k(ranked, relevant, k) for k in (1, 2, 3, 5)] == [0.0, 0.0, 1.0, 1.0]
    assert recall_at_k(ranked, relevant, 3) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, relevant, 5) == pytest.approx(2 / 3)
    assert mrr_at_k(ranked, relevant, 2) == 0.0
    assert mrr_at_k(ranked, relevant, 3) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, set(), 3) == 0.0
    assert hit_at_k([], relevant, 5) == 0.0


def test_evaluate_run_averages_over_judged_queries() -> None:
    run = {"q1": ["a", "b"], "q2": ["c", "d", "e"], "extra": ["a"]}
    qrels = {"q1": {"b"}, "q2": {"c", "e", "f", "g"}, "q3": {"x"}, "unjudged": set()}
    m = evaluate_run(run, qrels, [1, 3])
    # q1: hit@1 0, hit@3 1, recall@3 1, mrr 1/2; q2: hit@1 1, recall@1 1/4, recall@3 2/4, mrr 1; q3 missing -> 0
    assert m["hit@1"] == pytest.approx(1 / 3)
    assert m["hit@3"] == pytest.approx(2 / 3)
    assert m["recall@1"] == pytest.approx((0 + 0.25 + 0) / 3)
    assert m["recall@3"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["mrr@1"] == pytest.approx(1 / 3)
    assert m["mrr@3"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert (m["num_queries"], m["missing_queries"], m["extra_queries"]) == (3, 1, 1)


def test_evaluate_run_bad_input() -> None:
    with pytest.raises(ValueError, match="cutoffs"):
        evaluate_run({}, {"q": {"a"}}, [0])
    with pytest.raises(ValueError, match="no relevant judgements"):
        evaluate_run({"q": ["a"]}, {}, [1])
