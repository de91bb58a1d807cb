"""Retrieval metrics over ranked did lists and qrels (pure Python).

``hit@k`` (1 if a relevant did is in the top k: what UniIR/M-BEIR call "Recall@k"), the true
``recall@k`` (|relevant in top k| / |relevant|: at most 0.2 at k=1 for 5 relevant captions) and
``mrr@k`` score the list after the paper's §5 complement replacement. ``uniir_recall@k`` is UniIR's
Recall@k on the raw ids *as retrieved* (TIGER-AI-Lab/UniIR ``src/common/mbeir_retriever.py``@72871c19,
``compute_recall_at_k`` lines 149-166, called on the raw ids lines 467-480): equal to hit@k on a
single-modality pool, not on a union pool searched with ``--modality any``. Each is averaged over the
judged queries; a judged query missing from the run counts as zero (skipping a query is not rewarded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def hit_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return 1.0 if any(d in relevant for d in ranked[:k]) else 0.0


def recall_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & relevant) / len(relevant)


def mrr_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return next((1.0 / rank for rank, d in enumerate(ranked[:k], start=1) if d in relevant), 0.0)


METRICS = {"hit": hit_at_k, "recall": recall_at_k, "mrr": mrr_at_k}
#: What each metric key means, for tables and metrics files (both definitions side by side).
LABELS = {"hit": "hit@k after complement replacement (paper §5)", "recall": "true recall@k (replaced list)",
          "mrr": "MRR@k (replaced list)", "uniir_recall": "UniIR Recall@k (raw top-k ids, compute_recall_at_k)"}


def evaluate_run(run: Mapping[str, Sequence[Any]], qrels: Mapping[str, set[str]], ks: Sequence[int],
                 raw: Mapping[str, Sequence[str]] | None = None,
                 per_query: dict[str, dict[str, float]] | None = None) -> dict[str, object]:
    """Mean metrics ({"hit@1": ..., "num_queries": n, "missing_queries": m, ...}) of ``run`` (qid -> ranked dids,
    or the :class:`unirag.Hits` of a search or run file); ``raw``: qid -> ids as retrieved, by default the
    hits' own when every query has them (then also ``uniir_recall@k``). ``per_query`` receives each judged
    query's metrics, the rows of the means and of their intervals."""
    if not ks or any(int(k) <= 0 for k in ks):
        raise ValueError(f"cutoffs must be positive integers, got {list(ks)}")
    judged = [q for q, rel in qrels.items() if rel]
    if not judged:
        raise ValueError("the qrels contain no relevant judgements")
    raws = [getattr(hits, "raw", None) for hits in run.values()]
    if raw is None and raws and all(r is not None for r in raws):  # run files record them since unirag kept them
        raw = dict(zip(run, raws, strict=True))
    rows = per_query if per_query is not None else {}
    for qid in judged:
        ranked = [getattr(h, "did", h) for h in run.get(qid) or ()]
        row = {f"{name}@{k}": fn(ranked, qrels[qid], int(k)) for k in ks for name, fn in METRICS.items()}
        if raw is not None:
            row.update({f"uniir_recall@{k}": hit_at_k(raw.get(qid) or [], qrels[qid], int(k)) for k in ks})
        rows[qid] = row
    out: dict[str, object] = {key: sum(r[key] for r in rows.values()) / len(rows) for key in rows[judged[0]]}
    out["num_queries"] = len(rows)
    out["missing_queries"] = sum(1 for q in rows if q not in run)
    out["extra_queries"] = len(set(run) - set(rows))
    return out


def evaluate_run_file(run_path: str | Path, qrels_path: str | Path, ks: Sequence[int],
                      out: str | Path | None = None, *, resamples: int = 1000, bootstrap_seed: int = 0,
                      ci_method: str = "percentile") -> tuple[dict[str, object], Path, int, dict[str, Any]]:
    """Score a retrieval run file against a qrels file; writes ``{"run", "qrels", "k", "metrics",
    "intervals", "bootstrap", "labels"}`` to ``out`` (default: ``RUN.metrics.json`` beside the run).
    Returns the metrics, that path, the run's depth (cutoffs beyond it cannot find more) and the intervals.
    """
    from unirag.data.mbeir import read_qrels
    from unirag.errors import InputError
    from unirag.metrics.stats import query_intervals_result
    from unirag.retrieval.run_io import read_retrieval_run
    from unirag.runs.atomic import atomic_write_json

    run_path, qrels_path = Path(run_path), Path(qrels_path)
    run = read_retrieval_run(run_path)
    per_query: dict[str, dict[str, float]] = {}
    try:
        metrics = evaluate_run(run, read_qrels(qrels_path).relevant, ks, per_query=per_query)
    except ValueError as e:
        raise InputError(str(e), path=qrels_path) from None
    figures = {m: float(v) for m, v in metrics.items() if m in next(iter(per_query.values()))}
    intervals = query_intervals_result(per_query, figures, resamples, bootstrap_seed, ci_method)
    out = Path(out) if out is not None else run_path.with_name(run_path.stem + ".metrics.json")
    labels = {name: LABELS[name] for name in (*METRICS, "uniir_recall") if f"{name}@{ks[0]}" in metrics}
    atomic_write_json(out, {"run": str(run_path), "qrels": str(qrels_path), "k": list(ks), "metrics": metrics,
                            **intervals, "labels": labels})
    return metrics, out, max((len(r) for r in run.values()), default=0), intervals


def retrieval_metrics(rankings: Mapping[str, Sequence[str] | Iterable[Any]], qrels: Any,
                      k: Sequence[int] = (1, 5, 10)) -> dict[str, Any]:
    """hit@k (after complement replacement), true recall@k and MRR@k, averaged over the judged queries;
    for :class:`unirag.Hits` also ``uniir_recall@k``, UniIR's Recall@k on the raw top-k ids.

    ``rankings``: qid -> ranked dids, or the :class:`unirag.Hits` of :meth:`unirag.Retriever.search`.
    ``qrels``: qid -> relevant dids, or a :class:`unirag.Qrels`. Judged queries missing from
    ``rankings`` count as zeros.
    """
    from unirag.data.records import Qrels
    from unirag.errors import ConfigError

    relevant = qrels.relevant if isinstance(qrels, Qrels) else {q: set(d) for q, d in qrels.items()}
    try:
        return evaluate_run(rankings, relevant, [int(x) for x in k])
    except ValueError as e:
        raise ConfigError(str(e)) from None
