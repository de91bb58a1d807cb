"""Score arithmetic of X^R (paper Lines 8-10 and 15-16), kept free of I/O so it is checked by hand.

* :func:`aggregate_similarity` - Lines 8-9: the four cross-modal similarities are summed *within each
  imagined-caption modality*: ``S^t = s_t^t + s_v^t`` (both compare against C_t, the text-imagined
  caption) and ``S^v = s_t^v + s_v^v`` (both compare against C_v, the vision-imagined caption).
* :func:`rrf` - Line 10: each score vector becomes ranks (1 = best) and ``sum 1 / (k + rank)``.
* :func:`rerank_scores` - Line 15: ``(S_q^t + S_q^v) * (lam * norm(S^t) + (1 - lam) * norm(S^v))`` over
  the top-k' candidates only (normalisation over those k' values).
Ties are always broken by the earlier position (stable sorts), so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RRF_K = 60
NORMS = ("minmax", "none")


def aggregate_similarity(s_tt: np.ndarray | None, s_tv: np.ndarray | None, s_vt: np.ndarray | None,
                         s_vv: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(S^t, S^v) from the text agent's (s_t^t, s_t^v) and the vision agent's (s_v^t, s_v^v).

    An agent switched off (text-only / vision-only ablation) passes ``None`` for its two scores.
    """
    def total(a, b):
        parts = [np.asarray(x, dtype=np.float64) for x in (a, b) if x is not None]
        if not parts:
            raise ValueError("at least one similarity agent must be enabled")
        return np.sum(parts, axis=0)

    return total(s_tt, s_vt), total(s_tv, s_vv)


def ranks(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based rank of every entry when sorted by score descending (ties: earlier index first)."""
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    r = np.empty(len(s), dtype=np.int64)
    r[order] = np.arange(1, len(s) + 1)
    return r


def rrf(*score_vectors: Sequence[float] | np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Reciprocal rank fusion: ``sum_m 1 / (k + rank_m)`` for every candidate."""
    if not score_vectors:
        raise ValueError("rrf needs at least one score vector")
    return np.sum([1.0 / (k + ranks(v)) for v in score_vectors], axis=0)


def order_by(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """Indices sorted by score descending, ties by index."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def normalise(x: Sequence[float] | np.ndarray, method: str = "minmax", ties: float = 1.0) -> np.ndarray:
    """Min-max to [0, 1], or unchanged. All equal -> all ``ties``: 1 by default, so a tie never zeroes
    the product; 0 in the official code (setting ``xr_minmax_ties``)."""
    a = np.asarray(x, dtype=np.float64)
    if method == "none":
        return a
    if method != "minmax":
        raise ValueError(f"unknown normalisation {method!r}; expected one of {NORMS}")
    if a.size == 0:
        return a
    lo, hi = float(a.min()), float(a.max())
    if hi - lo <= 1e-12:
        return np.full_like(a, ties)
    return (a - lo) / (hi - lo)


def rerank_scores(sq_t: Sequence[float], sq_v: Sequence[float], s_t: Sequence[float], s_v: Sequence[float],
                  lam: float = 0.5, norm: str = "minmax", ties: float = 1.0) -> np.ndarray:
    """Line 15 for the top-k' candidates: (S_q^t + S_q^v) x (lam norm(S^t) + (1 - lam) norm(S^v))."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    q = np.asarray(sq_t, dtype=np.float64) + np.asarray(sq_v, dtype=np.float64)
    return q * (lam * normalise(s_t, norm, ties) + (1.0 - lam) * normalise(s_v, norm, ties))


def official_rerank_scores(sq_t: Sequence[float], sq_v: Sequence[float], similarity: Sequence[float],
                           w_t: float = 0.5, w_v: float = 0.5, ties: float = 0.0) -> np.ndarray:
    """The official stage-2 score of the top-k': (w_v S_q^v + w_t S_q^t) x min-max(similarity), both
    weights 0.5 when both verification paths run (one path alone: weight 1).

    01yzzyu/xr.github.io XR/xr.py:980-993 (stage2_rerank): ``_do_fusion_rerank`` (``0.5*qa_vals + 0.5*cap_vals``
    times ``_take_head``'s min-max of the stage-1 similarity, all-equal -> 0) and ``_do_single_rerank``.
    """
    q = w_t * np.asarray(sq_t, dtype=np.float64) + w_v * np.asarray(sq_v, dtype=np.float64)
    return q * normalise(similarity, "minmax", ties)


def description_similarity(image_sims: Sequence[np.ndarray] | None, caption_sims: Sequence[np.ndarray] | None,
                           tau: float = 0.15) -> list[np.ndarray]:
    """Official stage-1 score of every target description d over the candidates:
    (1 - tau) sim(d, image) + tau sim(d, caption); a side left out (ablation) contributes nothing.

    01yzzyu/xr.github.io XR/utils/inference_entrypoint_ray.py:943-959 (clip_rank_retrieval_ray):
    ``text_similarity * (1 - args.tau) + image_similarity * args.tau`` (its ``text_similarity`` is
    description -> image, ``image_similarity`` description -> caption); ``--tau`` 0.15 in XR/xr.py:1560.
    """
    sides = [(s, 1.0 - tau) for s in ([image_sims] if image_sims is not None else [])] + \
            [(s, tau) for s in ([caption_sims] if caption_sims is not None else [])]
    if not sides:
        raise ValueError("at least one similarity side must be enabled")
    n = len(sides[0][0])
    return [np.sum([w * np.asarray(sims[j], dtype=np.float64) for sims, w in sides], axis=0) for j in range(n)]
