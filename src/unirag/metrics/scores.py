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

    cleaned = {i: strip_answer_prefix(str(c)) if strip_prefixes else str(c) for i, c in predictions.items()}
    refs = {i: [str(r) for r in rs] for i, rs in references.items()}
    scores = score_captions(cleaned, refs, spice=spice, meteor=meteor, spice_lib=spice_lib)
    if per_item:
        return {"corpus": dict(scores.corpus), "per_item": scores.per_item, "skipped": dict(scores.skipped)}
    return dict(scores.corpus)


def retrieval_metrics(rankings: Mapping[str, Sequence[str] | Iterable[Any]], qrels: Any,
                      k: Sequence[int] = (1, 5, 10)) -> dict[str, Any]:
    """hit@k (after complement replacement), true recall@k and MRR@k, averaged over the judged queries;
    for :class:`unirag.Hits` also ``uniir_recall@k``, UniIR's Recall@k on the raw top-k ids.

    ``rankings``: qid -> ranked dids, or the :class:`unirag.Hits` of :meth:`unirag.Retriever.search`.
    ``qrels``: qid -> relevant dids, or a :class:`unirag.Qrels`. Judged queries missing from
    ``rankings`` count as zeros.
    """
    from unirag.data.records import Qrels
    from unirag.metrics.retrieval import evaluate_run

    relevant = qrels.relevant if isinstance(qrels, Qrels) else {q: set(d) for q, d in qrels.items()}
    ranked = {q: [getattr(h, "did", h) for h in hits] for q, hits in rankings.items()}
    raws = {q: getattr(hits, "raw", None) for q, hits in rankings.items()}
    raw = raws if raws and all(r is not None for r in raws.values()) else None
    try:
        return evaluate_run(ranked, relevant, [int(x) for x in k], raw=raw)
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


def image_metrics(images: Sequence[Any], texts: Sequence[str] | None = None, real_images: Sequence[Any] | None = None,
                  *, clip_model: str | Path | None = None, clip: tuple[Any, Any] | None = None,
                  fid_feature: Any = None, is_feature: Any = None, inception_weights: str | Path | None = None,
                  is_splits: int = 10, seed: int = 0, batch_size: int = 32, device: str | None = None,
                  per_item: bool = False, decode_workers: int | str | None = None) -> dict[str, Any]:
    """Image generation metrics, as ``unirag evaluate images`` computes them: FID of ``images`` against
    ``real_images``, CLIP Score of each image against ``texts[i]`` and Inception Score (mean, SD).

    Images are paths, PIL images or encoded bytes. CLIP Score needs ``clip_model`` (a CLIP checkpoint
    directory or cached hub id; the CLI defaults to ``openai/clip-vit-large-patch14``) or ``clip`` =
    (model, processor); FID/IS need the ``unirag[image-metrics]`` extra, or ``fid_feature`` /
    ``is_feature`` networks. A metric that cannot run is left out with its reason under ``"skipped"``.
    Returns ``{"FID", "CLIP Score", "IS", "IS SD"}`` (those that ran) plus ``"skipped"``; with
    ``per_item=True`` also ``"per_item"``: the CLIP Score of each image. ``decode_workers``: processes
    that decode image files ahead of the networks ("auto"/None: the cores available, at most 8, fewer
    than 128 images inline; 0: in this process); the metrics are the same either way.
    """
    from unirag.metrics.image_run import score_images
    from unirag.runs.engine import EngineOptions

    metrics, skipped, scores = score_images(images, texts, real_images, clip_model=clip_model, clip=clip,
                                            fid_feature=fid_feature, is_feature=is_feature,
                                            inception_weights=inception_weights, is_splits=is_splits, seed=seed,
                                            batch_size=batch_size, device=device,
                                            engine=EngineOptions(decode_workers=decode_workers))
    out: dict[str, Any] = {**metrics, "skipped": skipped}
    if per_item:
        out["per_item"] = scores
    return out
