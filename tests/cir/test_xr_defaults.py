"""X^R defaults follow the official code where the paper is silent (01yzzyu/xr.github.io at cf44a37):
k' = 100 (XR/xr.py:1561 --top_k), RRF k = 60 (:1543 --rrf_k), and one CLIP for image and caption
similarities (XR/utils/inference_entrypoint_ray.py:809-857 clip_extact_feature_ray, :864-946
clip_rank_retrieval_ray)."""

from __future__ import annotations

import numpy as np

from tiny_models import tiny_clip_dir
from unirag.cir.config import XRConfig, XRSettings
from unirag.cir.xr import XR


def _run(tmp_path, config):
    return XR(config, work_dir=tmp_path / "out", progress=False, echo=lambda s: None)


def test_k_prime_defaults_to_the_official_top_k():
    assert XRSettings().k_prime == 100 and XRSettings().rrf_k == 60


def test_a_configured_clip_encoder_also_embeds_the_captions(tmp_path):
    run = _run(tmp_path, XRConfig(encoder=str(tiny_clip_dir())))
    enc = run.encoder()
    assert run.text_encoder() is enc
    caps = ["a red dress with long sleeves", "a blue shirt"]
    assert np.allclose(run.text_encoder().encode_texts(caps), enc.encode_texts(caps))


def test_minilm_is_only_the_offline_fallback_or_an_explicit_choice(tmp_path):
    from unirag.encoders.text import SentenceTextEncoder

    offline = _run(tmp_path / "a", XRConfig())
    assert isinstance(offline.text_encoder(), SentenceTextEncoder)
    explicit = _run(tmp_path / "b", XRConfig(encoder=str(tiny_clip_dir()), text_encoder="minilm"))
    assert isinstance(explicit.text_encoder(), SentenceTextEncoder)
