"""Few-shot example selection (zero-shot / random / rag) and the offline retrieval captioners."""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import numpy as np
import pytest

from unirag.data.mbeir import load_pool, read_queries
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.retrieval_baseline import RetrievalCaptioner, consensus_index, lexical_similarity
from unirag.pipelines.examples import RandomGold, make_selector


@pytest.fixture(scope="module")
def qp(coco_set):
    return read_queries(coco_set["queries"]), load_pool(coco_set["pool"])


def test_zero_shot(qp):
    queries, _ = qp
    sel = make_selector("zero-shot", 0)
    assert sel.select(queries[0]) == [] and sel.k == 0
    with pytest.raises(ConfigError, match="k=0"):
        make_selector("zero-shot", 2)
    with pytest.raises(ConfigError, match="unknown mode"):
        make_selector("fewshot", 1)
    with pytest.raises(ConfigError, match="k >= 1"):
        make_selector("rag", 0, retrieval="x")


def test_random_is_seeded_per_query_and_never_the_query_itself(qp):
    queries, pool = qp
    sel = RandomGold(3, queries, pool, seed=11)
    for q in queries:
        exs = sel.select(q)
        assert len(exs) == 3 and len({e.img_path for e in exs}) == 3
        assert all(e.img_path != q.img_path for e in exs)
        assert all(e.text_did not in q.pos_cand_list for e in exs)
        # a gold pair: the other query's image with one of its own human captions
        for e in exs:
            assert pool[e.text_did].source_id == e.img_path.split("/")[-1].split(".")[0].lstrip("0")
    again = RandomGold(3, list(reversed(queries)), pool, seed=11)  # order-independent (resume-safe)
    assert [again.select(q) for q in queries] == [sel.select(q) for q in queries]
    other = RandomGold(3, queries, pool, seed=12)
    assert [other.select(q) for q in queries] != [sel.select(q) for q in queries]


def test_random_excludes_other_queries_of_the_same_image(qp):
    queries, pool = qp
    twin = type(queries[0])(qid="twin", modality=queries[0].modality, img_path=queries[1].img_path,
                            pos_cand_list=queries[1].pos_cand_list)
    sel = RandomGold(len(queries) - 1, queries + [twin], pool, seed=0)
    chosen = sel.select(queries[1])
    assert all(e.img_path != queries[1].img_path for e in chosen)
    with pytest.raises(ConfigError, match="needs more than"):
        RandomGold(len(queries), queries, pool)


def test_rag_from_run_takes_top_k_and_checks_coverage(qp, coco_set, tmp_path):
    queries, _ = qp
    sel = make_selector("rag", 2, retrieval=coco_set["run"])
    exs = sel.select(queries[0])
    rows = coco_set["rows"]
    assert [(e.img_path, e.txt) for e in exs] == [(rows[1]["image"], rows[1]["captions"][0]),
                                                  (rows[2]["image"], rows[2]["captions"][0])]
    assert exs[0].as_record() == {"image_did": f"img{rows[1]['image_id']}", "text_did": f"txt{rows[1]['image_id']}_0",
                                "img_path": rows[1]["image"], "txt": rows[1]["captions"][0]}
    sel.prepare(queries)
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(coco_set["run"].read_text().splitlines()[:2]) + "\n")
    with pytest.raises(InputError, match="10 query id.*no retrieval results"):
        make_selector("rag", 1, retrieval=short).prepare(queries)
    # a pair showing the query's own image is never used as its example
    line = json.loads(coco_set["run"].read_text().splitlines()[0])
    line["pairs"][0]["img_path"] = rows[0]["image"]
    leaky = tmp_path / "leaky.jsonl"
    leaky.write_text(json.dumps(line) + "\n")
    assert [e.img_path for e in make_selector("rag", 2, retrieval=leaky).select(queries[0])] == \
        [rows[2]["image"], rows[3]["image"]]


def _consensus_by_hand(captions: list[str], similarity: str) -> int:
    """The caption with the highest mean cosine to the others (first on ties), computed here without
    unirag's similarity code: unigram+bigram counts of lower-cased words, or MiniLM sentence vectors."""
    if similarity == "lexical":
        def grams(text):
            words = re.findall(r"[a-z0-9]+", text.lower())
            return Counter(words) + Counter(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))

        vecs = [grams(c) for c in captions]

        def cos(u, v):
            dot = sum(n * v[t] for t, n in u.items())
            return dot / (math.sqrt(sum(n * n for n in u.values())) * math.sqrt(sum(n * n for n in v.values())))
    else:
        from unirag.encoders.registry import load_text_encoder

        vecs = list(load_text_encoder(None).encode_texts(captions))

        def cos(u, v):
            return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))
    means = [sum(cos(vecs[i], vecs[j]) for j in range(len(vecs)) if j != i) / (len(vecs) - 1)
             for i in range(len(vecs))]
    return max(range(len(means)), key=lambda i: (round(means[i], 9), -i))


def test_consensus_of_two_captions_is_the_better_ranked():
    """Two captions tie (each one's mean similarity is their one cosine): the first wins, whatever
    float rounding does to the similarity matrix. The pair is one where it did not (golden caption run)."""
    gen = RetrievalCaptioner("consensus", similarity="minilm")
    pair = ["A toddler celebrates his birthday with a cupcake.", "A bowl of noodles, meat and broccoli with a fork."]
    for captions in (pair, pair[::-1]):
        assert gen.caption_from_examples(captions).raw == {"chosen_rank": 1}


def test_top1_and_consensus_on_real_captions(coco_set):
    rows = coco_set["rows"]
    top1 = RetrievalCaptioner("top1")
    assert top1.caption_from_examples([rows[3]["captions"][0], rows[0]["captions"][0]]).text == rows[3]["captions"][0]
    # four real captions of the kitchen photo and one of the skateboarder, ranked first:
    outlier = rows[1]["captions"][1]  # "a young man doing a jump with his skateboard in a skate park"
    kitchen = rows[0]["captions"][:4]
    captions = [outlier, *kitchen]
    for similarity in ("lexical", "minilm"):
        gen = RetrievalCaptioner("consensus", similarity=similarity)
        chosen = gen.caption_from_examples(captions)
        assert chosen.text in kitchen, similarity  # the top-1 outlier loses against the consensus
        assert chosen.text == captions[_consensus_by_hand(captions, similarity)], similarity
        assert chosen.raw == {"chosen_rank": captions.index(chosen.text) + 1}
    with pytest.raises(BackendError, match="no retrieved captions"):
        top1.caption_from_examples([])
    from PIL import Image

    from unirag.pipelines.captioner import Captioner

    with pytest.raises(ConfigError, match="picks among example captions"):
        Captioner(top1).caption(Image.new("RGB", (8, 8)), mode="zero-shot")


def test_lexical_similarity_by_hand():
    sim = lexical_similarity(["a dog", "a dog", "red car"])
    # "a dog": {a, dog, "a dog"} -> identical vectors: cosine 1; no shared token with "red car": 0
    assert sim[0, 1] == pytest.approx(1.0) and sim[0, 2] == 0.0 and sim[2, 2] == pytest.approx(1.0)
    assert consensus_index(sim) == 0  # ties go to the better-ranked caption


def test_top1_baselines_take_the_top_candidates_complement_from_its_source(tmp_path):
    """The official top-1 baselines look a top hit without a pair in the run up in the pool
    (castorini/UniRAG src/unirag/eval_caption_generation.py@0a6e6a36:154-158,
    src/unirag/eval_image_generation.py@e9a4e00:108-140): an image's caption is a text-only item of its
    source (not the caption of an image-text item), a caption's image the first item of its source
    with an image."""
    from unirag.data.mbeir import candidate_to_json
    from unirag.data.records import Candidate, Modality, Query
    from unirag.retrieval.results import Hit, Hits
    from unirag.retrieval.run_io import write_retrieval_run

    items = [Candidate(did="img", modality=Modality.IMAGE, img_path="a.jpg", source_id="s"),
             Candidate(did="both", modality=Modality.IMAGE_TEXT, img_path="b.jpg", txt="the pair's", source_id="s"),
             Candidate(did="txt", modality=Modality.TEXT, txt="the source's caption", source_id="s")]
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(candidate_to_json(c)) + "\n" for c in items))
    run = tmp_path / "run.jsonl"
    write_retrieval_run(run, [Hits([Hit(did=top, score=1.0, modality="image")], qid=qid)
                              for qid, top in (("q-img", "img"), ("q-txt", "txt"))])
    selector = make_selector("rag", 1, retrieval=run, pool_path=pool)
    assert selector.top_caption(Query(qid="q-img", modality=Modality.IMAGE, img_path="q.jpg")) == "the source's caption"
    image = selector.top_image(Query(qid="q-txt", modality=Modality.TEXT, txt="a caption"))
    assert (image.image_did, image.text_did, image.img_path, image.txt) == ("img", "txt", "a.jpg", "the source's caption")
