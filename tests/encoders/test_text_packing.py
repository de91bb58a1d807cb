"""Packed text batches (encoders/text.py): a batch of sentences laid end to end in rows, each attending
only to itself, gives every sentence the embedding it gets alone, so the service's batched searches
rank exactly as one-at-a-time ``Retriever.search`` does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import unirag
from unirag.encoders.text import PACK_TOKENS, SentenceTextEncoder, pack_rows

SAMPLE_CAPTIONS = Path(unirag.__file__).parent / "demo" / "data" / "captions.json"


@pytest.fixture(scope="module")
def model() -> SentenceTextEncoder:
    return SentenceTextEncoder(None, device="cpu")


def _captions() -> list[str]:
    return [a["caption"].strip() for a in json.loads(SAMPLE_CAPTIONS.read_text())["annotations"]]


def test_packed_batch_equals_each_sentence_alone(model):
    # short and long sentences, one longer than a row (it gets a row of its own) and one truncated
    texts = _captions()[:40] + ["dog", "a very long caption about a red bus " * 6, "words " * 400]
    lengths = [len(x) for x in model.tokenizer(texts, truncation=True, max_length=model.max_length)["input_ids"]]
    assert model.packed and max(lengths) > PACK_TOKENS and len(pack_rows(lengths, max(lengths))) < len(texts)
    alone = np.stack([model._embed_texts([t])[0] for t in texts])
    np.testing.assert_allclose(model._embed_texts(texts), alone, rtol=0, atol=2e-5)
    np.testing.assert_allclose(model._embed_texts(texts[::-1])[::-1], alone, rtol=0, atol=2e-5)


def test_pack_rows_places_every_sentence_once_in_balanced_rows():
    lengths = [13, 9, 26, 14, 14, 60, 3, 40, 22, 31]  # 232 tokens: 2 rows of 128 hold them
    rows = pack_rows(lengths, 128)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in row) for row in rows]
    assert len(rows) == 2 and max(loads) - min(loads) <= 3, loads  # not one full row and the rest
    assert pack_rows([5], 128) == [[0]]


def test_batched_searches_rank_as_one_at_a_time(demo):
    retriever = unirag.Retriever(demo["index"])
    queries = _captions()[::5][:40]
    batched = retriever.search_batch(texts=queries, k=10)
    for query, hits in zip(queries, batched, strict=True):
        alone = retriever.search(text=query, k=10)
        assert [h.did for h in hits] == [h.did for h in alone], query
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in alone], atol=1e-5)
