"""Composed-image-retrieval metrics, each exactly as its benchmark's official evaluation defines it.

* R@k (FashionIQ, CIRR; UniIR/M-BEIR): 1 when the target (M-BEIR: any positive) is among the top-k,
  averaged over queries, x100 (:func:`recall_at_k`).
* CIRCO R@k, k = 5/10/25/50 (miccunifi/CIRCO ``src/evaluation.py``): counts only the query's
  ``target_img_id`` - the image the relative caption was written for - not the other ground truths
  (:func:`target_recall_mean`). The any-ground-truth hit rate is reported beside it as
  ``R_anyGT@k``; on CIRCO val 191 of 220 queries have several ground truths, so the two differ.
* R_subset@k (CIRR): the ranking restricted to the query's ``img_set`` members, the reference image
  removed; 1 when the target is among the first k of that restricted ranking.
* mAP@k (CIRCO ``src/evaluation.py``): with ``rel_i`` = 1 when the i-th result is a ground truth,
  ``AP@k = sum_{i<=k} P@i * rel_i / min(k, #ground truths)``.

``tests/metrics/test_official_metrics.py`` checks these against ports of the official functions.
A ranking is a list of image ids, best first; per-query functions return [0, 1], the ``*_mean``
aggregators x100 averages. (Not ``ranx``/``pytrec_eval``: their AP divides by #relevant, not min(k, #gt).)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from unirag.errors import ConfigError
from unirag.metrics.retrieval import hit_at_k

RECALL_KS = (1, 5, 10, 50)
CIRCO_RECALL_KS = (5, 10, 25, 50)
SUBSET_KS = (1, 2, 3)
MAP_KS = (5, 10, 25, 50)


def _checked(targets: Iterable[str], k: int, metric: str) -> list[str]:
    """The ground-truth targets as a list (repeats kept); ValueError for a k below 1 or no target."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gts = list(targets)
    if not gts:
        raise ValueError(f"{metric} needs at least one ground-truth target")
    return gts


def recall_at_k(ranking: Sequence[str], targets: Iterable[str], k: int) -> float:
    """1.0 when any target is among the first k results: the foundation's hit@k, which CIR papers call R@k."""
    return hit_at_k(ranking, set(_checked(targets, k, "recall")), k)


def average_precision_at_k(ranking: Sequence[str], targets: Iterable[str], k: int) -> float:
    """CIRCO's AP@k: precision at each relevant hit in the top-k, summed, / min(k, #ground truths)."""
    gt_list = _checked(targets, k, "mAP")
    gts = set(gt_list)
    hits = 0
    total = 0.0
    for i, r in enumerate(ranking[:k], start=1):
        if r in gts:
            hits += 1
            total += hits / i
    return total / min(k, len(gt_list))  # the official divides by len(gt_img_ids), repeats included


def subset_ranking(ranking: Sequence[str], members: Iterable[str], reference: str | None) -> list[str]:
    """The ranking restricted to the CIRR ``img_set`` members, the reference removed, order kept."""
    keep = set(members) - {reference}
    return [r for r in ranking if r in keep]


PerQuery = dict[str, dict[str, float]]


def _means(name: str, ks: Sequence[int], qids: Sequence[str], score: Callable[[str, int], float],
           per_query: PerQuery | None) -> dict[str, float]:
    """``{name}@k``: ``score(qid, k)`` averaged over ``qids`` (x100) for each k; ``per_query`` receives
    each query's value (metric -> qid -> value), the rows its bootstrap interval resamples."""
    out = {}
    for k in ks:
        values = [score(q, k) for q in qids]
        if per_query is not None:
            per_query[f"{name}@{k}"] = dict(zip(qids, values, strict=True))
        out[f"{name}@{k}"] = 100.0 * sum(values) / len(values) if values else float("nan")
    return out


def recall_mean(rankings: Mapping[str, Sequence[str]], targets: Mapping[str, Iterable[str]],
                ks: Sequence[int] = RECALL_KS, name: str = "R", per_query: PerQuery | None = None) -> dict[str, float]:
    """R@k (a hit on any target) over the queries that have targets (x100); no ranking is a miss."""
    return _means(name, ks, [q for q, t in targets.items() if t],
                  lambda q, k: recall_at_k(rankings.get(q, []), targets[q], k), per_query)


def target_recall_mean(rankings: Mapping[str, Sequence[str]], targets: Mapping[str, str],
                       ks: Sequence[int] = CIRCO_RECALL_KS, per_query: PerQuery | None = None) -> dict[str, float]:
    """CIRCO's official R@k (``target_img_id`` only) averaged over queries (x100): how often the target
    itself is among the first k (0 or 1 for a ranking without repeats), the other ground truths not counted."""
    return _means("R", ks, [q for q, t in targets.items() if t is not None],
                  lambda q, k: float(sum(1 for r in rankings.get(q, [])[:k] if r == targets[q])), per_query)


def map_mean(rankings: Mapping[str, Sequence[str]], targets: Mapping[str, Iterable[str]],
             ks: Sequence[int] = MAP_KS, per_query: PerQuery | None = None) -> dict[str, float]:
    return _means("mAP", ks, [q for q, t in targets.items() if t],
                  lambda q, k: average_precision_at_k(rankings.get(q, []), targets[q], k), per_query)


def recall_subset_mean(rankings: Mapping[str, Sequence[str]], targets: Mapping[str, str],
                       members: Mapping[str, Iterable[str]], references: Mapping[str, str],
                       ks: Sequence[int] = SUBSET_KS, per_query: PerQuery | None = None) -> dict[str, float]:
    return _means("R_subset", ks, [q for q, t in targets.items() if t and q in members],
                  lambda q, k: recall_at_k(subset_ranking(rankings.get(q, []), members[q], references.get(q)),
                                           [targets[q]], k), per_query)


def cir_metrics(rankings: Mapping[str, Sequence[str]], targets: Mapping[str, str | Iterable[str]], *,
                k: Sequence[int] = (1, 5, 10, 50), map_k: Sequence[int] = (),
                subsets: Mapping[str, Iterable[str]] | None = None,
                references: Mapping[str, str] | None = None, subset_k: Sequence[int] = (1, 2, 3)) -> dict[str, float]:
    """Composed image retrieval metrics (x100), as the benchmarks define them: R@k of ``rankings`` (qid ->
    ranked image ids) against ``targets`` (qid -> target id(s)); mAP@k (CIRCO) for each ``map_k``; with
    ``subsets`` (qid -> the CIRR image set) R_subset@k for ``subset_k``, ``references[qid]`` removed.
    """
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
