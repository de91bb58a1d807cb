"""X^R's score arithmetic on precomputed embeddings (paper Lines 5-10 and 13-16), kept free of I/O
so that it is checked by hand with made-up vectors.

* :func:`coarse` - Lines 8-9: the four cross-modal similarities are summed *within each
  imagined-caption modality*: ``S^t = s_t^t + s_v^t`` (both compare against C_t, the text-imagined
  caption) and ``S^v = s_t^v + s_v^v`` (both compare against C_v, the vision-imagined caption).
* :func:`rrf` - Line 10: each score vector becomes ranks (1 = best) and ``sum 1 / (k + rank)``.
* :func:`fine` - Line 15: ``(S_q^t + S_q^v) * (lam * norm(S^t) + (1 - lam) * norm(S^v))`` over
  the top-k' candidates only (normalisation over those k' values).
Ties are always broken by the earlier position (stable sorts), so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RRF_K = 60
NORMS = ("minmax", "none")


def ranks(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based rank of every entry when sorted by score descending (ties: earlier index first)."""
    r = np.empty(len(scores), dtype=np.int64)
    r[order_by(scores)] = np.arange(1, len(scores) + 1)
    return r


def rrf(*score_vectors: Sequence[float] | np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Reciprocal rank fusion: ``sum_m 1 / (k + rank_m)`` for every candidate."""
    return np.sum([1.0 / (k + ranks(v)) for v in score_vectors], axis=0)


def order_by(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """Indices sorted by score descending, ties by index."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def normalise(x: Sequence[float] | np.ndarray, method: str = "minmax", ties: float = 1.0) -> np.ndarray:
    """Min-max to [0, 1], or unchanged. All equal -> all ``ties``: 1 by default, so a tie never zeroes
    the product; 0 in the official code (setting ``xr_minmax_ties``)."""
    a = np.asarray(x, dtype=np.float64)
    if method == "none" or a.size == 0:
        return a
    lo, hi = float(a.min()), float(a.max())
    if hi - lo <= 1e-12:
        return np.full_like(a, ties)
    return (a - lo) / (hi - lo)


@dataclass
class CoarseResult:
    """Scores over the candidate list of one query (reference already removed when required)."""

    s_t: np.ndarray          # S^t
    s_v: np.ndarray          # S^v
    rrf: np.ndarray
    order: np.ndarray        # candidate indices, best first (the list fed to fine filtering)
    #: the description-averaged similarity (the official 'aug' list's score)
    aug: np.ndarray | None = None
    #: the score of the list in ``order`` (RRF or aug): what the official re-ranking min-maxes
    similarity: np.ndarray | None = None


def with_source(s_t: np.ndarray, s_v: np.ndarray, fused: np.ndarray, aug: np.ndarray, source: str) -> CoarseResult:
    """The coarse scores, ordered by the stage-1 list fine filtering gets (setting ``xr_stage2_source``):
    ``rrf`` (paper Alg. 1 line 10, ``fused``) or ``aug``, the description-averaged similarity
    (01yzzyu/xr.github.io XR/xr.py:563-577 stage1_retrieve, :1545 ``--stage2_source`` default 'aug'; its
    RRF list is computed but unused)."""
    similarity = aug if source == "aug" else fused
    return CoarseResult(s_t, s_v, fused, order_by(similarity), aug=aug, similarity=similarity)


def coarse(caption_emb: np.ndarray | None, image_emb: np.ndarray | None,
           ct_text: np.ndarray, cv_text: np.ndarray, ct_cross: np.ndarray, cv_cross: np.ndarray,
           rrf_k: int = 60, source: str = "rrf") -> CoarseResult:
    """A_t^s on candidate captions (text space) and A_v^s on candidate images (cross-modal space).

    ``caption_emb`` / ``image_emb`` are None when that agent is ablated (vision-only / text-only).
    ``ct_text``/``cv_text``: C_t, C_v in the text space; ``ct_cross``/``cv_cross``: in the image-text space.
    """
    sides = [(emb, c_t, c_v) for emb, c_t, c_v in ((caption_emb, ct_text, cv_text), (image_emb, ct_cross, cv_cross))
             if emb is not None]  # (candidate side, C_t, C_v in its space)
    if not sides:
        raise ValueError("at least one similarity agent must be enabled")
    # Lines 8-9: summed within each imagined caption's modality: S^t = s_t^t + s_v^t, S^v = s_t^v + s_v^v
    s_t = np.sum([np.asarray(emb @ c_t, dtype=np.float64) for emb, c_t, _ in sides], axis=0)
    s_v = np.sum([np.asarray(emb @ c_v, dtype=np.float64) for emb, _, c_v in sides], axis=0)
    return with_source(s_t, s_v, rrf(s_t, s_v, k=rrf_k), (s_t + s_v) / 2.0, source)


def coarse_official(caption_emb: np.ndarray | None, image_emb: np.ndarray | None, desc_text: list[np.ndarray],
                    desc_cross: list[np.ndarray], tau: float = 0.15, rrf_k: int = 60,
                    source: str = "aug") -> CoarseResult:
    """Official stage-1 scoring (setting ``xr_scoring=official``) of every target description d_j:
    (1 - tau) <d_j, image> + tau <d_j, caption>, averaged over the descriptions ("aug"); the RRF
    list fuses the per-description lists. S^t = S^v = the averaged similarity.

    ``desc_text``/``desc_cross``: the descriptions in the caption (text) space and the image-text space;
    ``caption_emb``/``image_emb`` None when that side is ablated.
    01yzzyu/xr.github.io XR/utils/inference_entrypoint_ray.py:943-959 clip_rank_retrieval_ray (sum over the
    descriptions, divided by their number).
    """
    sides = ([(image_emb, desc_cross, 1.0 - tau)] if image_emb is not None else []) + \
            ([(caption_emb, desc_text, tau)] if caption_emb is not None else [])
    if not sides:
        raise ValueError("at least one similarity side must be enabled")
    # ``text_similarity * (1 - args.tau) + image_similarity * args.tau``, the official ``text_similarity``
    # being description -> image and ``image_similarity`` description -> caption
    per = [np.sum([w * np.asarray(emb @ descs[j], dtype=np.float64) for emb, descs, w in sides], axis=0)
           for j in range(len(sides[0][1]))]
    aug = np.mean(per, axis=0)
    return with_source(aug, aug, rrf(*per, k=rrf_k), aug, source)


def plain(similarity: np.ndarray) -> CoarseResult:
    """No imagination: one similarity (fused reference embedding) serves as both S^t and S^v."""
    s = np.asarray(similarity, dtype=np.float64)
    return with_source(s, s, s, s, "aug")


def question_score(expected: list[bool | None], answers: list[bool | None] | None) -> int:
    """+1 for every statement the judge answers as the question agent expects (a failed one-statement
    call, None, matches nothing; nor does an expected answer None, one no reply can equal)."""
    if answers is None:
        return 0
    return int(sum(1 for e, a in zip(expected, answers, strict=False)
                   if a is not None and e is not None and bool(e) == bool(a)))


def fine(top: np.ndarray, coarse_res: CoarseResult, sq_t: np.ndarray, sq_v: np.ndarray, lam: float,
         norm: str = "minmax", similarity: bool = True, rerank: str = "paper", ties: float = 1.0,
         weights: tuple[float, float] = (0.5, 0.5)) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank the top-k' candidate indices ``top``. Returns (re-ordered indices, final scores per ``top``).

    ``rerank``: "paper" (Alg. 1 line 15: (S_q^t + S_q^v) x (lam norm(S^t) + (1 - lam) norm(S^v)), normalised
    over the top-k') or "official" ((w_t S_q^t + w_v S_q^v) x min-max of the stage-2 list's similarity,
    ``weights`` = (w_t, w_v): 0.5 each when both verification paths run, one path alone: weight 1);
    ``ties``: the min-max value of all-equal scores.
    ``similarity=False`` (the fine-only ablation) ranks by the question scores alone.
    Ties keep the coarse order.
    """
    sq_t, sq_v = np.asarray(sq_t, dtype=np.float64), np.asarray(sq_v, dtype=np.float64)
    if similarity and rerank == "official":  # XR/xr.py:980-993 (stage2_rerank: _do_fusion_rerank, _do_single_rerank)
        final = (weights[0] * sq_t + weights[1] * sq_v) * normalise(coarse_res.similarity[top], "minmax", ties)
    elif similarity:  # Line 15
        final = (sq_t + sq_v) * (lam * normalise(coarse_res.s_t[top], norm, ties)
                                 + (1.0 - lam) * normalise(coarse_res.s_v[top], norm, ties))
    else:
        final = sq_t + sq_v
    return top[order_by(final)], final
