"""The search batcher (serve/batching.py): a lone request goes at once; under load the clients of the
last batch, coming back one after another, are gathered into one batch rather than a batch of one
followed by the rest."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from unirag.serve.batching import SearchBatcher


def _recording(calls: list[list], seconds: float):
    def search_batch(queries, k, modality):
        calls.append(list(queries))
        time.sleep(seconds)
        return [[f"{q}-hit"] for q in queries]

    return search_batch


def test_returning_clients_form_one_batch_not_a_batch_of_one_and_the_rest():
    calls: list[list] = []
    # 0.4 s per call: the gathering window after a batch is half of that (0.2 s), far above the stagger
    batcher = SearchBatcher(_recording(calls, 0.4), max_wait=5.0)

    async def scenario():
        first = await asyncio.gather(*(batcher.search(f"a{i}", k=3, modality="any") for i in range(4)))

        async def client(i):  # four clients whose next requests arrive 10 ms apart
            await asyncio.sleep(0.01 * i)
            return await batcher.search(f"b{i}", k=3, modality="any")

        second = await asyncio.gather(*(client(i) for i in range(4)))
        await batcher.close()
        return first, second

    first, second = asyncio.run(scenario())
    assert first == [[f"a{i}-hit"] for i in range(4)] and second == [[f"b{i}-hit"] for i in range(4)]
    assert [len(c) for c in calls] == [4, 4]


def test_each_batch_reports_its_size_and_duration():
    calls: list[list] = []
    seen: list[tuple[int, float]] = []
    batcher = SearchBatcher(_recording(calls, 0.05), on_batch=lambda size, seconds: seen.append((size, seconds)))

    async def scenario():
        await asyncio.gather(*(batcher.search(f"q{i}", k=1, modality="any") for i in range(3)))
        await batcher.close()

    asyncio.run(scenario())
    assert [size for size, _ in seen] == [len(c) for c in calls] == [3]
    assert all(seconds >= 0.05 for _, seconds in seen)  # the call slept 50 ms


def test_a_lone_client_is_never_held_back():
    calls: list[list] = []
    batcher = SearchBatcher(_recording(calls, 0.0), max_wait=30.0)  # a window would show as a 30 s hang

    async def scenario():
        out = [await batcher.search(f"q{i}", k=1, modality="any") for i in range(5)]
        await batcher.close()
        return out

    assert asyncio.run(asyncio.wait_for(scenario(), 20)) == [[f"q{i}-hit"] for i in range(5)]
    assert [len(c) for c in calls] == [1] * 5


def test_batched_searches_equal_one_at_a_time_and_run_on_the_model_thread(engine, monkeypatch):
    """A batch whose queries need a deeper search (a caption's image is found through its other captions,
    so the first candidates run out for many queries) answers each query as a search of its own does;
    searches and example retrieval both run on the engine's one model thread."""
    import threading

    from unirag.serve.engine import SearchQuery

    from .conftest import SAMPLE

    texts = [a["caption"] for a in json.loads((SAMPLE / "captions.json").read_text())["annotations"]][:28]
    batched = engine.search_batch([SearchQuery(text=t) for t in texts], 10)
    for text, hits in zip(texts, batched, strict=True):
        alone = engine.retriever.search(text=text, k=10)
        # a batch packs its sentences into shared rows: the vectors agree up to float rounding
        assert [(h.did, h.pair.image_did, h.pair.text_did) for h in hits] == \
            [(h.did, h.pair.image_did, h.pair.text_did) for h in alone]
        assert [h.score for h in hits] == pytest.approx([h.score for h in alone], abs=1e-5)

    seen = []
    real = engine.retriever.search_batch
    monkeypatch.setattr(engine.retriever, "search_batch",
                        lambda *a, **kw: seen.append(threading.get_ident()) or real(*a, **kw))
    engine.search_batch([SearchQuery(text=texts[0])], 3)
    engine.examples("rag", 2, text=texts[1])
    assert seen and set(seen) == {engine._model_ident} != {threading.get_ident()}


def test_caption_queries_search_once_and_answer_as_the_searches_again_did(engine, monkeypatch):
    """Over ``any`` a caption query reaches images through their captions (5 per image in the sample), so
    its first search goes deeper by that ratio (``cross_modal_depth``) instead of searching again: one
    FAISS call for the batch where 2k + 10 candidates sent about half the queries to a second, deeper one;
    the answers are those of the shallow first search and its deeper searches together."""
    from unirag.retrieval import retriever as retriever_module
    from unirag.serve.engine import SearchQuery

    from .conftest import SAMPLE

    texts = [a["caption"] for a in json.loads((SAMPLE / "captions.json").read_text())["annotations"]][:28]
    index = engine.retriever.index
    calls = []
    real_topk = index.topk
    monkeypatch.setattr(index, "topk", lambda vectors, k, *a, **kw: calls.append((len(vectors), k))
                        or real_topk(vectors, k, *a, **kw))

    def answers():
        calls.clear()
        hits = engine.search_batch([SearchQuery(text=t) for t in texts], 10)
        return [[(h.did, h.score, h.pair.image_did, h.pair.text_did) for h in row] for row in hits], list(calls)

    deep, deep_calls = answers()
    monkeypatch.setattr(retriever_module, "cross_modal_depth", lambda index, fetch, *a: fetch)
    shallow, shallow_calls = answers()
    assert deep == shallow
    assert deep_calls == [(28, 180)]  # 30 x (306 candidates / 51 images = 6)
    assert shallow_calls[0] == (28, 30) and sum(n for n, _ in shallow_calls[1:]) >= 5  # 9 searched again


def test_two_groups_out_of_step_merge_into_one_batch():
    """8 clients, then 8 more arriving while the first 8 are answered: the second batch waits for the
    first group to come back (16 searches, one forward pass) instead of the two groups taking turns."""
    calls: list[list] = []
    batcher = SearchBatcher(_recording(calls, 0.2), max_wait=5.0)

    async def client(name: str, delay: float, rounds: int) -> None:
        await asyncio.sleep(delay)
        for r in range(rounds):
            await batcher.search(f"{name}{r}", k=1, modality="any")
            await asyncio.sleep(0.005)

    async def main() -> None:
        await asyncio.gather(*[client(f"a{i}-", 0.0, 2) for i in range(8)],
                             *[client(f"b{i}-", 0.05, 1) for i in range(8)])
        await batcher.close()

    asyncio.run(main())
    assert [len(c) for c in calls] == [8, 16]
