"""Example selection on real COCO photos through the real offline encoder: diversity (one per image,
MMR), the near-duplicate leakage guard against a planted resized + re-encoded copy, and the
Selection object itself (options, manifest form)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from index.helpers import coco_items, write_coco_mbeir
from unirag import Index
from unirag.data.mbeir import read_qrels, read_queries, write_candidates
from unirag.data.records import Candidate, Modality
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError
from unirag.retrieval.retriever import Retriever
from unirag.retrieval.selection import Selection, Thresholds, normalise_where

PLANTED = "planted"


def _planted_copy(original: Path, out: Path) -> Path:
    """The photo as a web pool would hold a copy of it: resized to half and re-encoded as JPEG q60."""
    with Image.open(original) as im:
        im = im.convert("RGB")
        small = im.resize((im.width // 2, im.height // 2), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    small.save(buf, "JPEG", quality=60)
    out.write_bytes(buf.getvalue())
    assert out.read_bytes() != original.read_bytes()
    return out


@pytest.fixture(scope="module")
def planted(coco_mini: Path, tmp_path_factory):
    """COCO mini pool (51 photos, 255 captions, pool pairing) + a planted copy of photo 0 that
    carries photo 0's captions under other ids; an offline-encoder index of it."""
    tmp = tmp_path_factory.mktemp("planted")
    files = write_coco_mbeir(coco_mini, tmp / "mbeir")
    first = coco_items(coco_mini)[0]
    copy = _planted_copy(coco_mini / first["image"], tmp / "copy.jpg")
    pool = [json.loads(line) for line in files["pool"].read_text().splitlines()]
    extra = [Candidate(f"{PLANTED}:img", Modality.IMAGE, img_path=str(copy), source_id=PLANTED)]
    extra += [Candidate(f"{PLANTED}:txt:{j}", Modality.TEXT, txt=c, source_id=PLANTED)
              for j, c in enumerate(first["captions"])]
    from unirag.data.mbeir import parse_candidate

    cands = [parse_candidate(o, files["pool"], i) for i, o in enumerate(pool, start=1)] + extra
    write_candidates(files["pool"], cands)
    out = tmp / "index"
    Index.build(files["pool"], out, encoder=load_encoder(None), images_root=coco_mini, progress=False)
    retriever = Retriever(out)
    queries = read_queries(files["i2t"])
    qrels = read_qrels(files["qrels_i2t"])
    vectors = retriever.encoder.encode_records(queries, coco_mini)
    return {"retriever": retriever, "queries": queries, "qrels": qrels, "vectors": vectors, "files": files,
            "first": first}


def _run(planted, coco_mini, modality="text", **selection):
    return planted["retriever"].retrieve_vectors(planted["queries"], planted["vectors"], 5, modality,
                                                 exclude_qrels=planted["qrels"], query_images_root=coco_mini,
                                                 selection=selection)


def _distinct_images(results) -> list[int]:
    return [len({p.image_did for p in r.pairs}) for r in results]


def test_relevance_only_repeats_photos_and_one_per_image_never_does(planted, coco_mini) -> None:
    plain = _run(planted, coco_mini, near_duplicates="exclude")
    assert np.mean(_distinct_images(plain)) < 4  # the problem: captions of one photo crowd the examples
    one = _run(planted, coco_mini, near_duplicates="exclude", one_per_image=True)
    assert all(len(r.pairs) == 5 for r in one)
    assert _distinct_images(one) == [5] * len(one)
    # ranked candidates (what retrieval metrics score) do not change with example selection
    assert [r.dids for r in one] == [r.dids for r in plain]


def test_mmr_shows_at_least_four_distinct_photos_per_five_examples(planted, coco_mini) -> None:
    plain = np.mean(_distinct_images(_run(planted, coco_mini, near_duplicates="exclude")))
    mmr = _distinct_images(_run(planted, coco_mini, near_duplicates="exclude", diversity="mmr"))
    assert np.mean(mmr) >= 4.0 > plain
    # lam = 1 is relevance only: the examples in score order
    same = _run(planted, coco_mini, near_duplicates="exclude", diversity="mmr", mmr_lambda=1.0)
    assert all([p.score for p in r.pairs] == sorted((p.score for p in r.pairs), reverse=True) for r in same)
    assert np.mean(_distinct_images(same)) < 4


def test_default_mmr_shows_four_photos_per_five_and_keeps_relevance(planted, coco_mini) -> None:
    """The done-when of issue 28: the default diversity shows at least 4 distinct photos per 5
    examples, counting the planted copy as the photo it copies, while the mean relevance (retrieval
    score) of the chosen examples stays within 5 % of relevance-only selection."""
    same_photo = {f"{PLANTED}:img": f"img:{planted['first']['image_id']}"}

    def photos(results) -> float:
        return float(np.mean([len({same_photo.get(p.image_did, p.image_did) for p in r.pairs}) for r in results]))

    def relevance(results) -> float:
        return float(np.mean([p.score for r in results for p in r.pairs]))

    plain = _run(planted, coco_mini)
    diverse = _run(planted, coco_mini, diversity="mmr")  # the default lambda
    assert photos(plain) < 4 <= photos(diverse)
    assert relevance(diverse) >= 0.95 * relevance(plain)


def test_pair_redundancy_is_one_for_the_same_photo_and_relevance_keeps_examples_on_topic(monkeypatch) -> None:
    """Unit level: two captions of one photo and a photo's re-encoded copy are fully redundant; a
    pair that only shares caption words with a taken one keeps most of its relevance, so it still
    beats an off-topic pair of much lower relevance (the pink kurtas against the black scarf)."""
    from unirag.retrieval import near_duplicates
    from unirag.retrieval.results import Pair
    from unirag.retrieval.selection import Offer, PairPicker, QueryEvidence, mmr

    # the copy's dHash is 2 bits from its original's; other photos are far apart
    hashes = {"a.jpg": 0b1111, "a-copy.jpg": 0b0011, "b.jpg": 0xFFFF0000FFFF0000, "c.jpg": 0x00FF00FF00FF00FF}
    monkeypatch.setattr(near_duplicates, "hash_of", hashes.get)
    monkeypatch.setattr(near_duplicates, "digest_of", lambda path: None)

    def offer(did, image, caption, score):
        return Offer(did, Pair(f"img:{image}", did, image, caption, score), None, image)

    taken = [offer("t1", "a.jpg", "Biba Women Pink Kurta", 0.60),
             offer("t2", "a.jpg", "a pink kurta for women", 0.59),  # same photo, other caption
             offer("t3", "a-copy.jpg", "Women pink printed kurta", 0.58),  # a copy of the photo
             offer("t4", "b.jpg", "W Women Pink Kurta", 0.55),  # another kurta, similar title
             offer("t5", "c.jpg", "Puma Unisex Black Scarf", 0.30)]  # off topic
    picker = PairPicker(Selection(diversity="mmr"), 2, QueryEvidence(), None)
    picker.taken = taken
    red = picker.redundancy()
    assert red[0, 1] == red[0, 2] == 1.0 and 0 < red[0, 3] < 1 and red[0, 4] == 0
    chosen = [o.cand_did for o in mmr(taken, 2, Selection().mmr_lambda, red)]
    assert chosen == ["t1", "t4"]


def test_identical_captions_count_once_with_diversity(planted, coco_mini) -> None:
    """The planted copy repeats photo 0's captions: with a diversity option no example set holds
    the same caption twice (after case/punctuation folding)."""
    from unirag.retrieval.near_duplicates import caption_key

    for r in _run(planted, coco_mini, near_duplicates="off", one_per_image=True):
        keys = [caption_key(p.txt) for p in r.pairs]
        assert len(keys) == len(set(keys))


def test_planted_copy_is_flagged_under_report_and_never_shown_under_exclude(planted, coco_mini) -> None:
    """Searched over every candidate (as over M-BEIR's union pool), the copy is the top hit: an image
    for an image->text query, so it is replaced by its complement, and the pair shows the copy."""
    qid = f"i2t:{planted['first']['image_id']}"
    at = [q.qid for q in planted["queries"]].index(qid)
    off = _run(planted, coco_mini, "any", near_duplicates="off")[at]
    # without the guard the copy leaks: its captions are photo 0's own, under other ids
    assert any(p.image_did == f"{PLANTED}:img" or p.text_did.startswith(PLANTED) for p in off.pairs)
    assert off.near_duplicates is None

    report = _run(planted, coco_mini, "any")[at]  # the default: report
    leaked = [p for p in report.pairs if p.image_did == f"{PLANTED}:img" or p.text_did.startswith(PLANTED)]
    assert leaked and all(p.near_duplicate for p in leaked)
    assert any(p.near_duplicate.startswith("image-hash:") for p in leaked if p.image_did == f"{PLANTED}:img")
    assert report.near_duplicates["flagged"] >= len(leaked) and report.near_duplicates["excluded"] == 0
    assert report.to_json()["near_duplicates"] == report.near_duplicates

    exclude = _run(planted, coco_mini, "any", near_duplicates="exclude")[at]
    assert len(exclude.pairs) == 5
    assert not [p for p in exclude.pairs if p.image_did == f"{PLANTED}:img" or p.text_did.startswith(PLANTED)]
    assert not any(p.near_duplicate for p in exclude.pairs)
    assert exclude.near_duplicates["excluded"] == exclude.near_duplicates["flagged"] >= 1


def test_guard_through_search_with_an_in_memory_image(planted, coco_mini) -> None:
    """``Retriever.search`` with a PIL image (no file): the guard hashes the pixels given."""
    first = planted["first"]
    own = [f"txt:{first['image_id']}:{j}" for j in range(5)]
    with Image.open(coco_mini / first["image"]) as im:
        image = im.convert("RGB")
    hits = planted["retriever"].search(image=image, k=5, exclude=own, near_duplicates="exclude", one_per_image=True)
    assert len(hits.pairs) == 5 and not [p for p in hits.pairs if p.image_did == f"{PLANTED}:img"]
    assert hits.near_duplicates["excluded"] >= 1
    flagged = planted["retriever"].search(image=image, k=5, exclude=own)
    assert any(p.near_duplicate for p in flagged.pairs)


def test_selection_options_round_trip_and_bad_values() -> None:
    sel = Selection.of(None, diversity="mmr", mmr_lambda=0.5, one_per_image=True, near_duplicates="exclude",
                       image_hash=6, caption=0.9, pairs_from=["q.jsonl"], where={"dataset": "mscoco,0"})
    data = sel.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert Selection.from_dict(data) == sel and Selection.of(data) == sel
    assert data["where"] == {"dataset": ["mscoco", "0"]} and data["thresholds"]["image_hash"] == 6
    assert Selection() == Selection.of(None) and Selection().near_duplicates == "report"
    for bad in ({"diversity": "random"}, {"mmr_lambda": 1.5}, {"near_duplicates": "drop"}, {"image_hash": 65},
                {"caption": 0}, {"where": ["dataset"]}, {"where": {"bad field!": "x"}}, {"colour": "red"}):
        with pytest.raises(ConfigError):
            Selection.of(None, **bad)
    with pytest.raises(ConfigError):
        Thresholds(image_cosine=2.0)


def test_filters_parse_as_and_of_ors() -> None:
    assert normalise_where(["dataset=mscoco,0", "split=val"]) == (("dataset", ("mscoco", "0")), ("split", ("val",)))
    assert normalise_where(["modality=image,text"]) == (("modality", ("image,text",)),)  # the fused modality
    assert normalise_where(["modality=image|text"]) == (("modality", ("image", "text")),)
    assert normalise_where(["split=val,test", "split=test"]) == (("split", ("test",)),)  # AND of the same field
    with pytest.raises(ConfigError):
        normalise_where(["split=val", "split=test"])



def test_grid_cells_take_their_own_selection_with_command_line_options_laid_over() -> None:
    from unirag.pipelines.experiment import _cell_selection
    from unirag.pipelines.experiment_grid import Cell

    index_cell = Cell("c", "caption", "retrieval:top1", "rag", 5, "r", {"index": "idx"})
    run_cell = Cell("c", "caption", "retrieval:top1", "rag", 5, "r", {"retrieval": "run.jsonl"})
    own = {"diversity": "mmr", "thresholds": {"image_hash": 6}}
    given = Selection(one_per_image=True, near_duplicates="exclude")
    sel = _cell_selection(index_cell, own, given)
    assert (sel.diversity, sel.one_per_image, sel.near_duplicates, sel.thresholds.image_hash) == \
        ("mmr", True, "exclude", 6)
    assert _cell_selection(run_cell, None, given) == Selection()  # a run file holds its examples already
    assert _cell_selection(index_cell, own, None) == Selection.of(own)
