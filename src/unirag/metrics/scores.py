"""Metric functions on in-memory data (public as ``unirag.caption_metrics`` and friends).

The ``unirag evaluate`` commands read run directories and files and then call the same scorers;
these take what a notebook holds: ``{qid: caption}``, ``{qid: ranked dids}``, ``{qid: relevant}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from unirag.errors import ConfigError


def caption_metrics(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]], *,
                    spice: bool = False, meteor: bool = True, strip_prefixes: bool = True, per_item: bool = False,
                    spice_lib: str | Path | None = None) -> dict[str, Any]:
    """COCO caption metrics (x100): BLEU-1..4, METEOR, ROUGE-L, CIDEr and, with ``spice=True``, SPICE.

    ``predictions``: id -> generated caption; ``references``: id -> reference captions (same ids).
    Answer prefixes ("Caption: ...") are stripped as the caption evaluation does. Needs Java.
    With ``per_item=True`` the result is ``{"corpus": {...}, "per_item": {id: {...}}}``.
    """
    from unirag.metrics.captions import score_captions
    from unirag.metrics.text_normalize import strip_answer_prefix

    if set(predictions) != set(references):
        missing = sorted(set(references) - set(predictions))[:3]
        extra = sorted(set(predictions) - set(references))[:3]
        raise ConfigError(f"predictions and references must have the same ids (missing predictions: {missing}, "
                          f"without references: {extra})")
    cleaned = {i: strip_answer_prefix(str(c)) if strip_prefixes else str(c) for i, c in predictions.items()}
    refs = {i: [str(r) for r in rs] for i, rs in references.items()}
    scores = score_captions(cleaned, refs, spice=spice, meteor=meteor, spice_lib=spice_lib)
    if per_item:
        return {"corpus": dict(scores.corpus), "per_item": scores.per_item, "skipped": dict(scores.skipped)}
    return dict(scores.corpus)


def retrieval_metrics(rankings: Mapping[str, Sequence[str] | Iterable[Any]], qrels: Any,
                      k: Sequence[int] = (1, 5, 10)) -> dict[str, Any]:
    """hit@k (UniIR's "Recall@k"), true recall@k and MRR@k, averaged over the judged queries.

    ``rankings``: qid -> ranked dids, or the :class:`unirag.Hits` of :meth:`unirag.Retriever.search`.
    ``qrels``: qid -> relevant dids, or a :class:`unirag.Qrels`. Judged queries missing from
    ``rankings`` count as zeros.
    """
    from unirag.data.records import Qrels
    from unirag.metrics.retrieval import evaluate_run

    relevant = qrels.relevant if isinstance(qrels, Qrels) else {q: set(d) for q, d in qrels.items()}
    ranked = {q: [getattr(h, "did", h) for h in hits] for q, hits in rankings.items()}
    try:
        return evaluate_run(ranked, relevant, [int(x) for x in k])
    except ValueError as e:
        raise ConfigError(str(e)) from None


def cir_metrics(rankings: Mapping[str, Sequence[str]], targets: Mapping[str, str | Iterable[str]], *,
                k: Sequence[int] = (1, 5, 10, 50), map_k: Sequence[int] = (),
                subsets: Mapping[str, Iterable[str]] | None = None,
                references: Mapping[str, str] | None = None, subset_k: Sequence[int] = (1, 2, 3)) -> dict[str, float]:
    """Composed image retrieval metrics (x100), as the benchmarks define them.

    ``rankings``: qid -> ranked image ids; ``targets``: qid -> target id(s). R@k always; mAP@k
    (CIRCO) for each ``map_k``; with ``subsets`` (qid -> the CIRR image set) R_subset@k for
    ``subset_k``, the reference image (``references[qid]``) removed from the subset ranking.
    """
    from unirag.metrics.cir import map_mean, recall_mean, recall_subset_mean

    tgt = {q: [t] if isinstance(t, str) else list(t) for q, t in targets.items()}
    try:
        out = dict(recall_mean(rankings, tgt, k))
        if map_k:
            out.update(map_mean(rankings, tgt, map_k))
        if subsets is not None:
            out.update(recall_subset_mean(rankings, {q: t[0] for q, t in tgt.items() if t}, subsets,
                                          dict(references or {}), subset_k))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return out
