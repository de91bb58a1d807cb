"""The result of retrieving for one query: ranked candidates and image-caption pairs.

``candidates`` is the ranked list that retrieval metrics score (after the §5 wrong-modality
replacement); ``pairs`` are the few-shot examples a generator receives. They are kept apart
because a candidate can be a correct hit while its pair must be dropped (it would show the
query itself to the generator).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ScoredCandidate:
    did: str
    score: float
    modality: str
    #: did of the retrieved candidate of the wrong modality this one replaced (paper §5), if any.
    replaced: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"did": self.did, "score": round(float(self.score), 6), "modality": self.modality}
        if self.replaced is not None:
            out["replaced"] = self.replaced
        return out


@dataclass
class Pair:
    """An image-caption example; for an image+text candidate both dids are the same."""

    image_did: str
    text_did: str
    img_path: str | None
    txt: str | None
    score: float | None = None
    #: how the complement was found: "pairing" (same source item), "retrieval", or "fused".
    via: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.score is not None:
            out["score"] = round(float(self.score), 6)
        return out


@dataclass
class RetrievalResult:
    qid: str
    candidates: list[ScoredCandidate] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)

    @property
    def ranked_dids(self) -> list[str]:
        return [c.did for c in self.candidates]

    def to_json(self) -> dict[str, Any]:
        return {"qid": self.qid, "candidates": [c.to_json() for c in self.candidates],
                "pairs": [p.to_json() for p in self.pairs]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RetrievalResult:
        cands = [ScoredCandidate(str(c["did"]), float(c["score"]), str(c["modality"]), c.get("replaced"))
                 for c in obj.get("candidates", [])]
        pairs = [Pair(str(p["image_did"]), str(p["text_did"]), p.get("img_path"), p.get("txt"),
                      p.get("score"), p.get("via")) for p in obj.get("pairs", [])]
        return cls(str(obj["qid"]), cands, pairs)
