"""Retrieval metrics over ranked did lists and qrels (pure Python).

* ``hit@k``    - 1 if any relevant did is in the top k. UniIR/M-BEIR report this as "Recall@k".
* ``recall@k`` - the true recall, |relevant in top k| / |relevant|. For an image->text query with 5 relevant captions, recall@1 can
  be at most 0.2 while hit@1 can be 1.
* ``mrr@k``    - 1 / rank of the first relevant did within the top k, 0 if none.

Every metric is averaged over the queries that have at least one relevant did in the qrels;
queries of the qrels missing from the run count as zeros (a run that skips a query is not rewarded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def hit_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return 1.0 if any(d in relevant for d in ranked[:k]) else 0.0


def recall_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & relevant) / len(relevant)


def mrr_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    for rank, d in enumerate(ranked[:k], start=1):
        if d in relevant:
            return 1.0 / rank
    return 0.0


METRICS = {"hit": hit_at_k, "recall": recall_at_k, "mrr": mrr_at_k}


def evaluate_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, set[str]], ks: Sequence[int]
                 ) -> dict[str, object]:
    """Mean metrics: {"hit@1": ..., "recall@1": ..., "mrr@1": ..., "num_queries": n, "missing_queries": m}."""
    if not ks or any(int(k) <= 0 for k in ks):
        raise ValueError(f"cutoffs must be positive integers, got {list(ks)}")
    judged = [q for q, rel in qrels.items() if rel]
    if not judged:
        raise ValueError("the qrels contain no relevant judgements")
    sums = {f"{name}@{k}": 0.0 for k in ks for name in METRICS}
    missing = 0
    for qid in judged:
        ranked = run.get(qid)
        if ranked is None:
            missing += 1
            continue
        for k in ks:
            for name, fn in METRICS.items():
                sums[f"{name}@{k}"] += fn(ranked, qrels[qid], int(k))
    out: dict[str, object] = {key: value / len(judged) for key, value in sums.items()}
    out["num_queries"] = len(judged)
    out["missing_queries"] = missing
    out["extra_queries"] = len(set(run) - set(judged))
    return out
