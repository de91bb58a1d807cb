"""``pair_alignment = uniir-zip``: the official per-hit pairs, misaligned after an image+text hit.

Hits (in rank order): T1 (text), F (image+text), T2 (text), I3 (image), T4 (text). Their own complements:
T1 -> a1 (image), T2 -> a2 (image), I3 -> c3 (caption), T4 -> a4 (image).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from unirag.data.records import Candidate, Modality
from unirag.retrieval.pairing import QueryIdentity
from unirag.retrieval.uniir_pairs import per_hit_pairs

METAS = [
    Candidate("T1", Modality.TEXT, "a cat", None),
    Candidate("F", Modality.IMAGE_TEXT, "a fused pair", "f.jpg"),
    Candidate("T2", Modality.TEXT, "a dog", None),
    Candidate("I3", Modality.IMAGE, None, "i3.jpg"),
    Candidate("T4", Modality.TEXT, "a bus", None),
    Candidate("a1", Modality.IMAGE, None, "a1.jpg"),
    Candidate("a2", Modality.IMAGE, None, "a2.jpg"),
    Candidate("c3", Modality.TEXT, "a caption of i3", None),
    Candidate("a4", Modality.IMAGE, None, "a4.jpg"),
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


def _retrieved_pairs(tmp_path, settings) -> list[tuple[str, str]]:
    """A real index and ``Retriever`` under ``settings``: hits T1 (text), F (image+text), T2 (text), A, B
    (images) for the query vector; UniIR's complement query of "a cat" finds A, of "a dog" B, of an image T1."""
    from index.helpers import build_from_vectors
    from unirag.data.records import Query
    from unirag.retrieval.retriever import Retriever

    def e(*w):
        v = np.zeros(4, dtype=np.float32)
        v[: len(w)] = w
        return v / np.linalg.norm(v)

    pool = [("T1", "text", "a cat", None, e(1, 0, 0)), ("F", "image,text", "a fused pair", "f.jpg", e(.9, .1, 0)),
            ("T2", "text", "a dog", None, e(.8, .2, 0)), ("A", "image", None, "a.jpg", e(.1, 1, 0)),
            ("B", "image", None, "b.jpg", e(.05, 0, 1))]
    chunks = [(Modality.parse(m), [{"did": d, "txt": t, "img_path": i, "source_id": None}], v[None, :])
              for d, m, t, i, v in pool]
    build_from_vectors(chunks, tmp_path / "idx", 4, {"name": "hand", "spec": None, "config": {}, "fingerprint": "0" * 16})

    class ComplementEncoder:
        dim = 4

        def encode_records(self, records, images_root, progress=False):
            return np.stack([e(0, 1, 0) if r.txt == "a cat" else e(0, 0, 1) if r.txt == "a dog" else e(1, 0, 0)
                             for r in records])

    r = Retriever(tmp_path / "idx", profile=settings)
    r._encoder = ComplementEncoder()
    result = r.retrieve_vectors([Query("q1", Modality.IMAGE, img_path="q.jpg")], e(1, 0, 0)[None, :], 5, "any")[0]
    return [(p.image_did, p.text_did) for p in result.pairs]


def test_official_profile_reproduces_the_zip_and_says_so(tmp_path):
    """Through ``Retriever(profile=...)``: under ``official`` the complements [A (of T1), B (of T2), T1 (of A),
    T1 (of B)] are zipped against the hits [T1, F, T2, A, B] (castorini/UniRAG incontext_example_provider.py
    @07190083:11-13): T2 gets T1 (a caption: no image, skipped), A gets T1, B is dropped; the manifest lists
    the bug. ``pair_alignment = fixed`` on the same profile pairs each hit with its own complement."""
    from unirag.profiles import resolve

    official = resolve("official")
    assert _retrieved_pairs(tmp_path / "zip", official) == [("A", "T1"), ("F", "F"), ("A", "T1")]
    assert "pair_alignment" in official.to_dict()["reproduces_official_bugs"]
    fixed = resolve("official", pair_alignment="fixed")
    assert _retrieved_pairs(tmp_path / "fixed", fixed) == [("A", "T1"), ("F", "F"), ("B", "T2"), ("A", "T1"),
                                                           ("B", "T1")]
    assert "pair_alignment" not in fixed.to_dict().get("reproduces_official_bugs", [])
