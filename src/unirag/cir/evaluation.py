"""Benchmark metrics of a set of rankings, averaged the way each benchmark reports them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from unirag.cir.datasets import CirDataset
from unirag.metrics.cir import (
    CIRCO_RECALL_KS,
    MAP_KS,
    RECALL_KS,
    SUBSET_KS,
    map_mean,
    recall_mean,
    recall_subset_mean,
    target_recall_mean,
)
from unirag.metrics.stats import DEFAULT_RESAMPLES, bootstrap_interval


def evaluate(dataset: CirDataset, rankings: Mapping[str, Sequence[str]],
             subset_rankings: Mapping[str, Sequence[str]] | None = None, *, resamples: int = DEFAULT_RESAMPLES,
             bootstrap_seed: int = 0, method: str = "percentile") -> dict[str, Any]:
    """FashionIQ/M-BEIR: R@1/5/10/50; CIRR: + R_subset@1/2/3 and (R@5 + R_subset@1) / 2; CIRCO: mAP@k and
    R@k at 5/10/25/50 as its official script (target_img_id only), plus R_anyGT@k (any ground truth).

    Returns {"n_queries": ..., metric: value x100, "intervals": {metric: {"low", "high", "se"}}} (each
    metric's 95 % bootstrap interval over the queries, ``method`` "percentile" or "BCa", ``resamples``
    seeded by ``bootstrap_seed``; 0: no intervals), or a note when the split has no ground truth.
    """
    targets = {q.qid: q.targets for q in dataset.queries if q.targets and q.qid in rankings}
    if not targets:
        return {"n_queries": 0, "note": "no ground truth in this split (test set): use the submission files"}
    out: dict[str, Any] = {"n_queries": len(targets)}
    rows: dict[str, dict[str, float]] = {}
    if dataset.kind == "circo":
        out.update(map_mean(rankings, targets, MAP_KS, per_query=rows))
        out.update(target_recall_mean(rankings, {q.qid: q.main_target for q in dataset.queries if q.qid in targets},
                                      CIRCO_RECALL_KS, per_query=rows))
        out.update(recall_mean(rankings, targets, CIRCO_RECALL_KS, name="R_anyGT", per_query=rows))
        return _with_intervals(out, rows, resamples, bootstrap_seed, method)
    out.update(recall_mean(rankings, targets, RECALL_KS, per_query=rows))
    if dataset.kind == "cirr" and subset_rankings is not None:
        members = {q.qid: q.subset for q in dataset.queries if q.subset is not None}
        refs = {q.qid: q.reference for q in dataset.queries}
        sub = recall_subset_mean(subset_rankings, {q: t[0] for q, t in targets.items()}, members, refs, SUBSET_KS,
                                 per_query=rows)
        out.update(sub)
        out["avg(R@5,R_subset@1)"] = (out["R@5"] + out["R_subset@1"]) / 2
    return _with_intervals(out, rows, resamples, bootstrap_seed, method)


def _with_intervals(out: dict[str, Any], rows: Mapping[str, Mapping[str, float]], resamples: int,
                    seed: int, method: str) -> dict[str, Any]:
    """Add each metric's interval (x100, as the figures) from its per-query values; the CIRR average
    (R@5 + R_subset@1) / 2 resamples the queries that have both."""
    if not resamples:
        return out
    import numpy as np

    intervals = {}
    for name, values in rows.items():
        ci = bootstrap_interval([100.0 * v for v in values.values()], n_resamples=resamples, seed=seed,
                                method=method)
        if ci is not None:
            intervals[name] = ci.as_dict()
    if "avg(R@5,R_subset@1)" in out:
        both = [q for q in rows["R_subset@1"] if q in rows["R@5"]]
        pairs = np.array([[100.0 * rows["R@5"][q], 100.0 * rows["R_subset@1"][q]] for q in both])
        ci = bootstrap_interval(pairs, lambda r: r.mean(axis=-2).mean(axis=-1), n_resamples=resamples, seed=seed,
                                method=method)
        if ci is not None:
            intervals["avg(R@5,R_subset@1)"] = ci.as_dict()
    out["intervals"] = intervals
    return out


def average(per_dataset: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Mean of each numeric metric over datasets (FashionIQ reports the mean of its three categories)."""
    keys = [k for k in next(iter(per_dataset.values()), {}) if k != "n_queries"]
    out = {}
    for k in keys:
        vals = [m[k] for m in per_dataset.values() if isinstance(m.get(k), (int, float))]  # not "intervals"
        if vals and len(vals) == len(per_dataset):
            out[k] = sum(vals) / len(vals)
    return out
