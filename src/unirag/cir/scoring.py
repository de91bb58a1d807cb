"""Per-query X^R scoring on precomputed embeddings (paper Lines 5-10 and 13-16).

Kept apart from the orchestration so that the arithmetic can be checked with hand-made vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from unirag.cir.fusion import aggregate_similarity, order_by, rerank_scores, rrf


@dataclass
class CoarseResult:
    """Scores over the candidate list of one query (reference already removed when required)."""

    s_t: np.ndarray          # S^t
    s_v: np.ndarray          # S^v
    rrf: np.ndarray
    order: np.ndarray        # candidate indices, best first
    parts: dict[str, np.ndarray] = field(default_factory=dict)  # s_tt, s_tv, s_vt, s_vv when computed


def coarse(caption_emb: np.ndarray | None, image_emb: np.ndarray | None,
           ct_text: np.ndarray, cv_text: np.ndarray, ct_cross: np.ndarray, cv_cross: np.ndarray,
           rrf_k: int = 60) -> CoarseResult:
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
    return CoarseResult(s_t, s_v, fused, order_by(fused), parts)


def plain(similarity: np.ndarray) -> CoarseResult:
    """No imagination: one similarity (fused reference embedding) serves as both S^t and S^v."""
    s = np.asarray(similarity, dtype=np.float64)
    return CoarseResult(s, s, s, order_by(s))


def question_score(expected: list[bool], answers: list[bool] | None) -> int:
    """+1 for every statement the judge answers as the question agent expects."""
    if answers is None:
        return 0
    return int(sum(1 for e, a in zip(expected, answers, strict=False) if bool(e) == bool(a)))


def fine(top: np.ndarray, coarse_res: CoarseResult, sq_t: np.ndarray, sq_v: np.ndarray, lam: float,
         norm: str = "minmax", similarity: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank the top-k' candidate indices ``top``. Returns (re-ordered indices, final scores per ``top``).

    ``similarity=False`` (the fine-only ablation) ranks by the question scores alone.
    Ties keep the coarse order.
    """
    if similarity:
        final = rerank_scores(sq_t, sq_v, coarse_res.s_t[top], coarse_res.s_v[top], lam, norm)
    else:
        final = np.asarray(sq_t, dtype=np.float64) + np.asarray(sq_v, dtype=np.float64)
    return top[order_by(final)], final
