"""Per-query X^R scoring on precomputed embeddings (paper Lines 5-10 and 13-16).

Kept apart from the orchestration so that the arithmetic can be checked with hand-made vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from unirag.cir.fusion import (
    aggregate_similarity,
    description_similarity,
    official_rerank_scores,
    order_by,
    rerank_scores,
    rrf,
)


@dataclass
class CoarseResult:
    """Scores over the candidate list of one query (reference already removed when required)."""

    s_t: np.ndarray          # S^t
    s_v: np.ndarray          # S^v
    rrf: np.ndarray
    order: np.ndarray        # candidate indices, best first (the list fed to fine filtering)
    parts: dict[str, np.ndarray] = field(default_factory=dict)  # s_tt, s_tv, s_vt, s_vv when computed
    #: the description-averaged similarity (the official 'aug' list's score)
    aug: np.ndarray | None = None
    #: the score of the list in ``order`` (RRF or aug): what the official re-ranking min-maxes
    similarity: np.ndarray | None = None


def with_source(res: CoarseResult, source: str) -> CoarseResult:
    """Pick the stage-1 list fine filtering gets (setting ``xr_stage2_source``): ``rrf`` (paper Alg. 1
    line 10) or ``aug``, the description-averaged similarity (01yzzyu/xr.github.io XR/xr.py:563-577
    stage1_retrieve, :1545 ``--stage2_source`` default 'aug'; its RRF list is computed but unused)."""
    if source == "aug":
        res.order, res.similarity = order_by(res.aug), res.aug
    elif source == "rrf":
        res.order, res.similarity = order_by(res.rrf), res.rrf
    else:
        raise ValueError(f"unknown stage-2 source {source!r}; expected rrf or aug")
    return res


def coarse(caption_emb: np.ndarray | None, image_emb: np.ndarray | None,
           ct_text: np.ndarray, cv_text: np.ndarray, ct_cross: np.ndarray, cv_cross: np.ndarray,
           rrf_k: int = 60, source: str = "rrf") -> CoarseResult:
    """A_t^s on candidate captions (text space) and A_v^s on candidate images (cross-modal space).

    ``caption_emb`` / ``image_emb`` are None when that agent is ablated (vision-only / text-only).
    ``ct_text``/``cv_text``: C_t, C_v in the text space; ``ct_cross``/``cv_cross``: in the image-text space.
    """
    parts: dict[str, np.ndarray] = {}
    if caption_emb is not None:
        parts["s_tt"] = caption_emb @ ct_text
        parts["s_tv"] = caption_emb @ cv_text
    if image_emb is not None:
        parts["s_vt"] = image_emb @ ct_cross
        parts["s_vv"] = image_emb @ cv_cross
    s_t, s_v = aggregate_similarity(parts.get("s_tt"), parts.get("s_tv"), parts.get("s_vt"), parts.get("s_vv"))
    fused = rrf(s_t, s_v, k=rrf_k)
    return with_source(CoarseResult(s_t, s_v, fused, order_by(fused), parts, aug=(s_t + s_v) / 2.0), source)


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
    image_sims = [image_emb @ d for d in desc_cross] if image_emb is not None else None
    caption_sims = [caption_emb @ d for d in desc_text] if caption_emb is not None else None
    per = description_similarity(image_sims, caption_sims, tau)
    aug = np.mean(per, axis=0)
    fused = rrf(*per, k=rrf_k)
    parts = {f"d{j + 1}": v for j, v in enumerate(per)}
    return with_source(CoarseResult(aug, aug, fused, order_by(fused), parts, aug=aug), source)


def plain(similarity: np.ndarray) -> CoarseResult:
    """No imagination: one similarity (fused reference embedding) serves as both S^t and S^v."""
    s = np.asarray(similarity, dtype=np.float64)
    return CoarseResult(s, s, s, order_by(s), aug=s, similarity=s)


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

    ``rerank``: "paper" (Alg. 1 line 15) or "official" (``weights`` = (w_t, w_v) times the min-max of
    the stage-2 list's similarity); ``ties``: the min-max value of all-equal scores.
    ``similarity=False`` (the fine-only ablation) ranks by the question scores alone.
    Ties keep the coarse order.
    """
    if similarity and rerank == "official":
        final = official_rerank_scores(sq_t, sq_v, coarse_res.similarity[top], weights[0], weights[1], ties)
    elif similarity:
        final = rerank_scores(sq_t, sq_v, coarse_res.s_t[top], coarse_res.s_v[top], lam, norm, ties)
    else:
        final = np.asarray(sq_t, dtype=np.float64) + np.asarray(sq_v, dtype=np.float64)
    return top[order_by(final)], final
