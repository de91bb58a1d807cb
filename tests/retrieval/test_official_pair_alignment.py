"""``pair_alignment = uniir-zip``: the official per-hit pairs, misaligned after an image+text hit.

Hits (in rank order): T1 (text), F (image+text), T2 (text), I3 (image), T4 (text). Their own complements:
T1 -> a1 (image), T2 -> a2 (image), I3 -> c3 (caption), T4 -> a4 (image).
"""

from __future__ import annotations

from types import SimpleNamespace

from unirag.data.records import Modality
from unirag.index.metadata import CandidateMeta
from unirag.retrieval.pairing import QueryIdentity
from unirag.retrieval.uniir_pairs import per_hit_pairs

METAS = [
    CandidateMeta("T1", Modality.TEXT, "a cat", None, None),
    CandidateMeta("F", Modality.IMAGE_TEXT, "a fused pair", "f.jpg", None),
    CandidateMeta("T2", Modality.TEXT, "a dog", None, None),
    CandidateMeta("I3", Modality.IMAGE, None, "i3.jpg", None),
    CandidateMeta("T4", Modality.TEXT, "a bus", None, None),
    CandidateMeta("a1", Modality.IMAGE, None, "a1.jpg", None),
    CandidateMeta("a2", Modality.IMAGE, None, "a2.jpg", None),
    CandidateMeta("c3", Modality.TEXT, "a caption of i3", None, None),
    CandidateMeta("a4", Modality.IMAGE, None, "a4.jpg", None),
]
OWN = {0: 5, 2: 6, 3: 7, 4: 8}


class Completer:
    def complement(self, gid, ident):
        return (OWN[gid], "uniir") if gid in OWN else None


def _pairs(zip_bug: bool) -> list[tuple[str, str]]:
    index = SimpleNamespace(metas=METAS)
    ident = QueryIdentity(text=None, image_paths=frozenset({"q.jpg"}), excluded=frozenset(), raw_image="q.jpg")
    found, _ = per_hit_pairs(index, Completer(), ident, [0, 1, 2, 3, 4], [0.9, 0.8, 0.7, 0.6, 0.5], 10, 10,
                             zip_bug=zip_bug)
    return [(METAS[i].img_path, METAS[t].txt) for i, t, _, _ in found]


def test_official_zip_misaligns_complements_after_an_image_text_hit():
    """TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py@98dc570:264-278 builds complement queries for the text
    and image hits only, :289-308 appends one complement per such query (None when none is found); castorini/
    UniRAG src/unirag/incontext_example_provider.py@07190083:11-13 zips them against *every* hit. Complement
    list: [a1, a2, c3, a4] against hits [T1, F, T2, I3, T4]:
      T1 + a1 -> (a1, a cat); F -> its own pair; T2 + c3 -> a caption has no image: skipped (:35-37);
      I3 + a4 -> an image has no text: skipped; T4 -> zip stops (4 complements): dropped."""
    assert _pairs(zip_bug=True) == [("a1.jpg", "a cat"), ("f.jpg", "a fused pair")]
    assert _pairs(zip_bug=False) == [("a1.jpg", "a cat"), ("f.jpg", "a fused pair"), ("a2.jpg", "a dog"),
                                     ("i3.jpg", "a caption of i3"), ("a4.jpg", "a bus")]


def test_official_profile_reproduces_the_zip_and_says_so():
    from unirag.profiles import resolve

    official = resolve("official")
    assert official["pair_alignment"] == "uniir-zip" and "pair_alignment" in official.to_dict()[
        "reproduces_official_bugs"]
