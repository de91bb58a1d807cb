"""``unirag.Captioner`` captions as ``unirag caption`` does, from examples in any form."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from cli_runner import run_cli
from PIL import Image

import unirag
from fake_openai_server import Reply
from unirag.data.mbeir import read_queries, write_queries
from unirag.retrieval.results import Hit, Hits, Pair

N_QUERIES = 8


@pytest.fixture(scope="module")
def noleak(demo, tmp_path_factory):
    """Queries, a leakage-free retrieval run made by the CLI, and the same retrieval through the API."""
    from unirag.data.mbeir import read_qrels

    tmp = tmp_path_factory.mktemp("captioner")
    queries = read_queries(demo["i2t"])[:N_QUERIES]
    write_queries(tmp / "queries.jsonl", queries)
    run_cli("retrieve", "--index", demo["index"], "--queries", tmp / "queries.jsonl", "--images-root",
            demo["images"], "--k", 5, "--modality", "text", "--exclude-positives", demo["qrels_i2t"],
            "--out", tmp / "run.jsonl")
    qrels = read_qrels(demo["qrels_i2t"])
    retriever = unirag.Retriever(demo["index"])
    hits = {q.qid: retriever.search(Image.open(demo["images"] / q.img_path), k=5, modality="text",
                                    exclude=qrels.get(q.qid)) for q in queries}
    return {"dir": tmp, "queries": queries, "run": tmp / "run.jsonl", "hits": hits}


def _cli_captions(demo, noleak, out, generator, *extra) -> dict[str, str]:
    run_cli("caption", "--queries", noleak["dir"] / "queries.jsonl", "--images-root", demo["images"],
            "--generator", generator, "--mode", "rag", "--k", 5, "--retrieval", noleak["run"],
            "--out", out, "--no-progress", *extra)
    return {r["qid"]: r["caption"] for r in map(json.loads, (out / "outputs.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("generator", ["retrieval:consensus", "retrieval:top1"])
def test_example_captioners_match_the_cli(demo, noleak, tmp_path, generator):
    cli = _cli_captions(demo, noleak, tmp_path / "run", generator)
    captioner = unirag.Captioner(generator)
    for q in noleak["queries"]:
        caption = captioner.caption(Image.open(demo["images"] / q.img_path), noleak["hits"][q.qid])
        assert caption.text == cli[q.qid]
        assert caption.prompt == [] and caption.cost == 0.0
        assert [s.caption for s in caption.examples] == [p.caption for p in noleak["hits"][q.qid].pairs]


def _fingerprint_responder(req):
    """Answers with a digest of the whole request body: equal captions mean equal prompts (images included)."""
    body = req.json
    digest = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()[:16]
    return Reply.chat(f"caption {digest}")


def test_prompting_generator_gets_the_same_prompt_as_the_cli(demo, noleak, tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    fake_server.responder = _fingerprint_responder
    cli = _cli_captions(demo, noleak, tmp_path / "run", "openai:gpt-4o", "--base-url", fake_server.url,
                        "--concurrency", 1)
    captioner = unirag.Captioner("openai:gpt-4o", base_url=fake_server.url)
    for q in noleak["queries"][:4]:
        caption = captioner.caption(demo["images"] / q.img_path, noleak["hits"][q.qid])
        assert caption.text == cli[q.qid]
        assert caption.usage.output_tokens == 10 and caption.cost is not None and caption.cost > 0
        assert len(caption.prompt[-1].images) == 6  # five examples and the query


def test_examples_as_tuples_of_in_memory_images(demo, noleak, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    q = noleak["queries"][0]
    pairs = noleak["hits"][q.qid].pairs[:2]
    buf = io.BytesIO()
    Image.open(pairs[1].image).save(buf, format="JPEG")
    examples = [(Image.open(pairs[0].image), pairs[0].caption), (buf.getvalue(), pairs[1].caption)]
    caption = unirag.Captioner("openai:gpt-4o", base_url=fake_server.url).caption(
        Image.open(demo["images"] / q.img_path), examples)
    sent = fake_server.requests[-1].json["messages"][-1]["content"]
    urls = [c["image_url"]["url"] for c in sent if c["type"] == "image_url"]
    assert len(urls) == 3 and urls[1].startswith("data:image/jpeg;base64,")  # bytes in a web format go as they are
    texts = " ".join(c["text"] for c in sent if c["type"] == "text")
    assert pairs[0].caption in texts and pairs[1].caption in texts
    fake_server.push(Reply.chat("  A dog on a couch.  "))
    again = unirag.Captioner("openai:gpt-4o", base_url=fake_server.url).caption(buf.getvalue(), examples[:1])
    assert caption.text.startswith("caption ") and again.text == "A dog on a couch."  # stripped


def test_modes_and_bad_examples(demo, noleak):
    q = noleak["queries"][0]
    image = demo["images"] / q.img_path
    hits = noleak["hits"][q.qid]
    with pytest.raises(unirag.ConfigError, match="zero-shot mode takes no examples"):
        unirag.Captioner("openai:gpt-4o").caption(image, hits, mode="zero-shot")
    with pytest.raises(unirag.ConfigError, match="picks among example captions"):
        unirag.Captioner("retrieval:top1").caption(image, mode="zero-shot")
    with pytest.raises(unirag.BackendError, match="no retrieved captions"):
        unirag.Captioner("retrieval:top1").caption(image, [])
    with pytest.raises(unirag.InputError, match=r"examples\[0\].*got str"):
        unirag.Captioner("retrieval:top1").caption(image, ["just a string"])
    with pytest.raises(unirag.ConfigError, match="unknown generator spec"):
        unirag.Captioner("llama:x")
    # hits, pairs and tuples are the same examples
    top1 = unirag.Captioner("retrieval:top1")
    first = hits.pairs[0]
    assert top1.caption(image, [hits[0]]).text == top1.caption(image, [first]).text == \
        top1.caption(image, [(first.image, first.caption)]).text == first.caption
    assert isinstance(first, Pair)
    # on search hits retrieval:top1 takes the top hit's own pair, as `unirag caption` and the official code
    # do, even where the few-shot pairs start with another (the top's own was dropped from them)
    own, later = Pair.of(first.image, "the top hit's own caption"), Pair.of(first.image, "a later hit's caption")
    ranked = Hits([Hit("a", 0.9, "image", pair=own), Hit("b", 0.8, "image", pair=later)], pairs=[later])
    assert top1.caption(image, ranked).text == "the top hit's own caption"


def test_to_dict_round_trip():
    captioner = unirag.Captioner("retrieval:consensus", similarity="lexical", max_tokens=50)
    again = unirag.Captioner.from_dict(json.loads(json.dumps(captioner.to_dict())))
    assert again.to_dict() == captioner.to_dict()
    assert again.backend.similarity == "lexical"
