"""``Retriever(profile="official")``: UniIR's pair completion and UniRAG's per-hit pairs, on hand-placed vectors.

The official rules themselves are pinned in tests/reproduce/test_official_settings.py; this checks that
the retriever applies them (and that the default profile keeps unirag's completion)."""

from __future__ import annotations

import numpy as np

from index.helpers import build_from_vectors
from unirag.data.records import Modality, Query
from unirag.profiles import resolve
from unirag.retrieval.retriever import Retriever

DIM = 4
ENC = {"name": "hand-placed", "spec": None, "config": {}, "fingerprint": "0" * 16}


def e(*w: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(w)] = w
    return v / np.linalg.norm(v)


POOL = [("T1", "text", "a dog on a sofa", None, e(1, 0, 0)),
        ("T2", "text", "a dog outdoors", None, e(0.8, 0.3, 0)),
        ("IQ", "image", None, "query.jpg", e(1, 0, 0.1)),      # the query's own image
        ("I2", "image", None, "b.jpg", e(0.9, 0.2, 0)),
        ("I3", "image", None, "c.jpg", e(0, 0, 1))]


class ComplementEncoder:
    """Encodes every complement query (what UniIR re-encodes) towards I3; records what it was asked."""

    dim = DIM

    def __init__(self):
        self.seen = []

    def encode_records(self, records, images_root, progress=False):
        self.seen.extend(records)
        return np.stack([e(0, 0, 1) for _ in records])


def _retriever(tmp_path, profile):
    chunks = [(Modality.parse(m), [{"did": d, "txt": t, "img_path": i, "source_id": None}], v[None, :])
              for d, m, t, i, v in POOL]
    build_from_vectors(chunks, tmp_path / "idx", DIM, ENC)
    r = Retriever(tmp_path / "idx", profile=profile)
    r._encoder = ComplementEncoder()
    return r


def test_official_profile_completes_with_instructed_re_encoding(tmp_path):
    """``official``: each text hit is re-encoded as an MSCOCO task-0 query (TIGER-AI-Lab/UniIR
    src/common/interactive_retriever.py at commit 1104db5c :40, :84, :108) and completed with the first
    image in its top 10 other than the query's (src/common/mbeir_retriever.py at commit 72871c19
    :277-298); ``default``: unirag's own completion, the candidate's stored vector searched over images."""
    query = Query("q1", Modality.IMAGE, img_path="query.jpg")
    default = _retriever(tmp_path / "a", "default").retrieve_vectors([query], e(1, 0, 0)[None, :], 2, "text")[0]
    official_r = _retriever(tmp_path / "b", "official")
    official = official_r.retrieve_vectors([query], e(1, 0, 0)[None, :], 2, "text")[0]
    assert [c.did for c in default] == [c.did for c in official] == ["T1", "T2"]
    assert [(p.image_did, p.text_did) for p in default.pairs][0] == ("I2", "T1")  # stored vector, over images
    assert [(p.image_did, p.text_did, p.via) for p in official.pairs] == [("I3", "T1", "uniir"), ("I3", "T2", "uniir")]
    asked = official_r.encoder.seen
    assert {q.task_id for q in asked} == {0} and all(q.qid.startswith("9:") for q in asked)
    assert default.raw == official.raw == ["T1", "T2"]


def test_raw_ids_are_the_hits_before_replacement(tmp_path):
    """A text->image query over ``any``: a caption hit is replaced by its image in ``candidates`` (paper §5),
    while ``raw`` keeps the caption's id (what UniIR's Recall@k scores: TIGER-AI-Lab/UniIR
    src/common/mbeir_retriever.py at commit 72871c19 :467-480)."""
    r = _retriever(tmp_path, "default")
    result = r.retrieve_vectors([Query("q2", Modality.TEXT, txt="a dog")], e(1, 0, 0)[None, :], 2, "any")[0]
    assert result.raw[0] == "T1" and result[0].did != "T1" and result[0].replaced == "T1"
    assert r.to_dict()["profile"]["profile"] == "default"
    assert Retriever.from_dict(_retriever(tmp_path / "o", "official").to_dict()).settings["pair_completion"] == "uniir"


class SplitComplementEncoder(ComplementEncoder):
    """Texts "cap 0".."cap <first - 1>" re-encode towards the query's own image (no acceptable complement in
    their top 10), "cap <first>".. towards another image."""

    def __init__(self, first=12):
        super().__init__()
        self.first = first

    def encode_records(self, records, images_root, progress=False):
        self.seen.extend(records)
        return np.stack([e(0, 0, 1) if int(r.txt.split()[1]) >= self.first else e(0, 1, 0) for r in records])


def _twenty_captions(tmp_path, first):
    pool = [(f"T{i}", "text", f"cap {i}", None, e(1 - 0.01 * i, 0.05, 0)) for i in range(20)]
    pool += [("IQ", "image", None, "query.jpg", e(0, 1, 0)), ("I3", "image", None, "c.jpg", e(0, 0, 1))]
    chunks = [(Modality.parse(m), [{"did": d, "txt": t, "img_path": i, "source_id": None}], v[None, :])
              for d, m, t, i, v in pool]
    build_from_vectors(chunks, tmp_path / "idx", DIM, ENC)
    r = Retriever(tmp_path / "idx", profile="official")
    r._encoder = SplitComplementEncoder(first)
    return r


def test_official_profile_reads_fifty_hits_for_fashion200k(tmp_path):
    """UniRAG's provider reads every hit UniIR saved: 10 for an MSCOCO query, 50 for a Fashion200k one
    (tests/reproduce/test_official_settings.py::test_per_hit_pairs_read_as_many_hits_as_unirags_retrieval_saved
    cites the lines). Here only the 13th text on has a complement: MSCOCO gets no example, Fashion200k does."""
    r = _twenty_captions(tmp_path, 12)
    got = {}
    for qid in ("9:q", "1:q"):
        res = r.retrieve_vectors([Query(qid, Modality.IMAGE, img_path="query.jpg")], e(1, 0, 0)[None, :], 1, "text")[0]
        got[qid] = [(p.image_did, p.text_did) for p in res.pairs]
    assert got == {"9:q": [], "1:q": [("I3", "T12")]}


def test_official_pairs_are_the_per_hit_ones_not_a_widened_pick(tmp_path):
    """castorini/UniRAG get_candidates (incontext_example_provider.py at commit 07190083 :10-45) reads the
    saved top 10 and nothing more: when only the 11th hit has a complement, an MSCOCO query has no example,
    whereas unirag's own per-candidate pick (default) reads further and finds one."""
    r = _twenty_captions(tmp_path / "o", 10)
    q = [Query("9:q", Modality.IMAGE, img_path="query.jpg")]
    assert r.retrieve_vectors(q, e(1, 0, 0)[None, :], 1, "text")[0].pairs == []
    d = _twenty_captions(tmp_path / "d", 10)
    d.settings = resolve("default", pair_completion="uniir")
    d.per_hit = False
    assert [(p.image_did, p.text_did) for p in d.retrieve_vectors(q, e(1, 0, 0)[None, :], 1, "text")[0].pairs] == \
        [("I3", "T10")]


def test_per_hit_pairs_refuse_selection_that_chooses_among_pairs(tmp_path):
    """The official pairs are taken as UniRAG's code makes them; asking to choose among them (MMR, one pair per
    image, dropping near-duplicates) is a ConfigError instead of being silently ignored."""
    import pytest

    from unirag.errors import ConfigError

    r = _retriever(tmp_path, "official")
    q = [Query("q1", Modality.IMAGE, img_path="query.jpg")]
    for sel in ({"diversity": "mmr"}, {"one_per_image": True}, {"near_duplicates": "exclude"}):
        with pytest.raises(ConfigError, match="per-candidate"):
            r.retrieve_vectors(q, e(1, 0, 0)[None, :], 2, "text", selection=sel)
    assert r.retrieve_vectors(q, e(1, 0, 0)[None, :], 2, "text", selection={"near_duplicates": "report"})[0].pairs
    # the report is about the per-hit pairs shown: the one copying a reference caption is marked and counted
    got = r.retrieve_vectors(q, e(1, 0, 0)[None, :], 2, "text", selection={"near_duplicates": "report"},
                             references=[["a dog outdoors"]])[0]
    assert [p.text_did for p in got.pairs if p.near_duplicate] == ["T2"] and got.near_duplicates["flagged"] == 1
    assert _retriever(tmp_path / "d", "default").retrieve_vectors(q, e(1, 0, 0)[None, :], 2, "text",
                                                                   selection={"diversity": "mmr"})[0].pairs
