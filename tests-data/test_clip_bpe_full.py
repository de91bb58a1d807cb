"""OpenAI CLIP's tokenizer files in the shared data folder (``clip-bpe/``: the original ``.txt.gz`` and the
Hugging Face ``vocab.json``/``merges.txt`` a hub snapshot of ``openai/clip-vit-*`` holds) against what the
default suite uses: the committed BPE fixture, the vocabulary the tests build from it, and unirag's
tokenization (OpenAI's clean-up + the hub-layout tokenizer) against the reference written from OpenAI's
``clip/simple_tokenizer.py`` (see tests/openai_clip_reference.py for the file and lines)."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from openai_clip_reference import OpenAIReferenceTokenizer
from tiny_models import CLIP_BPE_GZ, clip_bpe_merges, clip_bpe_vocab, tiny_uniir_clip_sf

TEXTS = ["Tom &amp; Jerry", "Tom &amp;amp; Jerry", "&lt;i&gt;caf\u00c3\u00a9&lt;/i&gt; &quot;x&quot;",
         "  A  man's\tdog\u00a0isn't here  ", "東京 123 🐶 — ok…", "word " * 90]


@pytest.fixture(scope="module")
def bpe(shared_data):
    return shared_data / "clip-bpe"


def test_committed_fixture_is_the_original_file(bpe):
    digest = hashlib.sha256((bpe / "bpe_simple_vocab_16e6.txt.gz").read_bytes()).hexdigest()
    assert hashlib.sha256(CLIP_BPE_GZ.read_bytes()).hexdigest() == digest


def test_vocabulary_built_from_the_merges_is_the_hub_one(bpe):
    merges = clip_bpe_merges()
    hub_merges = [tuple(x.split()) for x in (bpe / "merges.txt").read_text(encoding="utf-8").splitlines()[1:] if x]
    assert merges == hub_merges
    assert clip_bpe_vocab(merges) == json.loads((bpe / "vocab.json").read_text(encoding="utf-8"))


def test_hub_layout_tokenizer_with_unirags_clean_up_is_openais(bpe, tmp_path):
    from transformers import CLIPTokenizerFast

    from unirag.encoders.uniir import UniIRClipSFEncoder

    vocab = json.loads((bpe / "vocab.json").read_text(encoding="utf-8"))
    merges = [tuple(x.split()) for x in (bpe / "merges.txt").read_text(encoding="utf-8").splitlines()[1:] if x]
    try:
        tok = CLIPTokenizerFast(vocab=vocab, merges=merges)  # transformers 5
    except TypeError:
        tok = CLIPTokenizerFast(vocab_file=str(bpe / "vocab.json"), merges_file=str(bpe / "merges.txt"))
    tok.save_pretrained(tmp_path / "tok")
    ckpt = tmp_path / "ckpt" / "clip_sf.pth"
    ckpt.parent.mkdir()
    shutil.copy(tiny_uniir_clip_sf(real_bpe=True), ckpt)
    enc = UniIRClipSFEncoder(f"uniir:clip_sf:{ckpt}", device="cpu", tokenizer=str(tmp_path / "tok"),
                             use_instructions=False)
    batch = enc.tokenize(TEXTS)
    got = [row[m.bool()].tolist() for row, m in zip(batch["input_ids"], batch["attention_mask"], strict=True)]
    ref = OpenAIReferenceTokenizer()
    assert got == [ref.tokenize(t) for t in TEXTS]
