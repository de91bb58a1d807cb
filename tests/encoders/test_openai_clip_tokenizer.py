"""CLIP texts are tokenized as OpenAI's tokenizer does, on the real 49,408-token BPE (committed in
tests/fixtures/clip-bpe): OpenAI's clean-up before BPE included (ftfy, HTML entities, whitespace), which
the Hugging Face tokenizer unirag loads leaves out on its own.

The reference tokenizer (``tests/openai_clip_reference.py``) is written from OpenAI's ``clip/simple_tokenizer.py`` (openai/CLIP at commit
2558ec83): ``basic_clean`` (lines 50-53: ``ftfy.fix_text``, ``html.unescape`` twice, strip),
``whitespace_clean`` (lines 56-59: ``\\s+`` -> one space, strip), then in ``SimpleTokenizer.encode`` lower-case,
the pre-tokenizing pattern, byte-to-unicode mapping and the lowest-rank-first BPE; and ``clip.tokenize``'s
layout (start token, BPE ids, end token; UniIR calls it with ``truncate=True``: a text over 77 tokens keeps
its first 76 and ends with the end token, TIGER-AI-Lab/UniIR ``src/models/uniir_clip/clip_scorefusion/
clip_sf.py`` at commit 669475c4, line 31: ``tokenizer(txt, context_length=77, truncate=True)``; the
truncating ``tokenize`` itself is in no stored openai/CLIP version, see tests/openai_clip_reference.py).
UniIR formats every text first: ``format_string`` (TIGER-AI-Lab/UniIR ``src/data/preprocessing/utils.py``
at commit 669475c4, lines 110-116), applied in ``src/data/mbeir_dataset.py`` at commit 1017242a (lines
237, 245, 357).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from openai_clip_reference import EOT, SOT, OpenAIReferenceTokenizer, normalise, ref_encode_text
from tiny_models import tiny_uniir_clip_sf
from unirag.encoders.instructions import format_string
from unirag.encoders.preprocess import clean_clip_text
from unirag.encoders.registry import load_encoder

TEXTS = [
    "Tom &amp; Jerry",
    "Tom &amp;amp; Jerry chase each other",        # escaped twice: OpenAI unescapes twice
    "&lt;b&gt;Bold&lt;/b&gt; &quot;quoted&quot; &#39;apostrophe&#39; &eacute;t&eacute;",
    "A caf\u00c3\u00a9 with a cr\u00c3\u00a8me br\u00c3\u00bbl\u00c3\u00a9e",  # mojibake that ftfy repairs
    "  lots   of\twhite\u00a0space\n\nhere  ",
    "A man's dog isn't HERE, they'll say: it's 12:30!",
    "naïve façade, Zürich, 東京タワー, 123 456",
    "emoji 🐶🐱 and symbols ©®™ — dashes – and … ellipsis",
    "word " * 90,                                    # longer than the context: truncated
]


@pytest.fixture(scope="module")
def reference() -> OpenAIReferenceTokenizer:
    return OpenAIReferenceTokenizer()


@pytest.fixture(scope="module")
def encoder():
    return load_encoder(f"uniir:clip_sf:{tiny_uniir_clip_sf(real_bpe=True)}", device="cpu", dtype="float32",
                        use_instructions=False)


def _ids(batch) -> list[list[int]]:
    return [row[mask.bool()].tolist() for row, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True)]


def test_reference_knows_openai_ids(reference):
    """Anchors from OpenAI's vocabulary: the special tokens' ids and common words as single tokens."""
    assert reference.ids["<|startoftext|>"] == SOT and reference.ids["<|endoftext|>"] == EOT
    assert len(reference.ids) == 49408
    assert reference.encode("a photo of a dog") == [reference.ids[w + "</w>"] for w in ("a", "photo", "of", "a", "dog")]


def test_texts_tokenize_exactly_as_openai(encoder, reference):
    got = _ids(encoder.tokenize(TEXTS))
    want = [reference.tokenize(t) for t in TEXTS]
    for text, g, w in zip(TEXTS, got, want, strict=True):
        assert g == w, text
    assert len(want[-1]) == 77 and want[-1][-1] == EOT


def test_without_the_clean_up_html_entities_would_tokenize_otherwise(encoder, reference):
    """The bug this fixes: the Hugging Face tokenizer alone keeps "&amp;" as three tokens."""
    raw = _ids(encoder.processor(["Tom &amp; Jerry"], return_tensors="pt", padding=True))[0]
    assert raw != reference.tokenize("Tom &amp; Jerry")
    assert _ids(encoder.tokenize(["Tom &amp; Jerry"]))[0] == reference.tokenize("Tom & Jerry")


def test_clean_up_is_openais(reference):
    for t in TEXTS:
        assert clean_clip_text(t).lower() == reference.clean(t)
    assert clean_clip_text("Tom &amp;amp; Jerry") == "Tom & Jerry"
    assert clean_clip_text(" a\u3000b\t\tc\n") == "a b c"


def test_text_embeddings_follow_openai_tokens(encoder, reference):
    """The vectors are the OpenAI CLIP text forward of OpenAI's token ids (UniIR formats texts first)."""
    sd = torch.load(encoder.checkpoint, map_location="cpu", weights_only=True)["model"]
    raw = {k.removeprefix("clip_model."): v.double() for k, v in sd.items()}
    texts = TEXTS[:4]
    tokens = torch.zeros(len(texts), 77, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = reference.tokenize(format_string(t))
        tokens[i, : len(ids)] = torch.tensor(ids)
    expected = normalise(ref_encode_text(raw, tokens).numpy())
    np.testing.assert_allclose(encoder.encode_texts(texts), expected, atol=1e-5, rtol=0)
