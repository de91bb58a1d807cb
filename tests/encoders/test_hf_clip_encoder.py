"""HF CLIP-family backend, exercised on a tiny random CLIP saved to disk and loaded like a real checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tiny_models import tiny_clip_dir, tiny_siglip_dir
from unirag.data.records import Candidate, Modality
from unirag.encoders.base import l2_normalize
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError, InputError


@pytest.fixture(scope="module")
def clip_encoder():
    return load_encoder(str(tiny_clip_dir()), batch_size=4)


@pytest.fixture(scope="module")
def photos(coco_mini: Path) -> list[Path]:
    rows = [json.loads(line) for line in (coco_mini / "captions.jsonl").read_text().splitlines()[:7]]
    return [coco_mini / r["image"] for r in rows]


def test_loads_local_dir_through_hf_backend(clip_encoder):
    from unirag.encoders.hf_clip import HFClipEncoder

    assert isinstance(clip_encoder, HFClipEncoder)
    cfg = clip_encoder.config()
    assert cfg["model"] == str(tiny_clip_dir()) and cfg["device"] == "cpu" and cfg["dtype"] == "float32"
    assert cfg["model_type"] == "clip"
    assert cfg["dim"] == 16 and clip_encoder.dim == 16


def test_shapes_and_unit_norm(clip_encoder, photos):
    texts = ["a man making pizza in a kitchen", "two dogs", "a red bus on a street", "x", "", "tennis"]
    t = clip_encoder.encode_texts(texts)
    i = clip_encoder.encode_images(photos)
    assert t.shape == (6, 16) and i.shape == (len(photos), 16)
    assert t.dtype == np.float32 and i.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(i, axis=1), 1.0, atol=1e-5)
    # different inputs give different vectors (a constant output would pass the norm check)
    assert np.abs(t[0] - t[1]).max() > 1e-3 and np.abs(i[0] - i[1]).max() > 1e-3


def test_same_input_same_vector_regardless_of_batch(clip_encoder, photos):
    """Batching (size 4, partial batches, padding of texts) must not change any single vector."""
    alone = clip_encoder.encode_images([photos[5]])[0]
    in_batch = clip_encoder.encode_images(photos)[5]  # second batch, position 1
    np.testing.assert_allclose(alone, in_batch, atol=1e-5)
    short = "a dog"
    a = clip_encoder.encode_texts([short])[0]
    b = clip_encoder.encode_texts(["a much longer caption that forces padding of the short one", short])[1]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_pil_and_path_give_same_vector(clip_encoder, photos):
    from PIL import Image

    with Image.open(photos[0]) as im:
        pil = im.convert("RGB")
    np.testing.assert_allclose(clip_encoder.encode_images([pil])[0], clip_encoder.encode_images([photos[0]])[0],
                               atol=1e-6)


def test_fused_is_normalised_sum_of_raw_embeddings(clip_encoder, photos):
    """UniIR CLIP-SF: img_emb + txt_emb of the unnormalised projections (TIGER-AI-Lab/UniIR
    ``src/models/uniir_clip/clip_scorefusion/clip_sf.py`` at commit 669475c4, ``fuse_embeddings`` line 43),
    normalised at scoring (``src/common/mbeir_retriever.py`` at commit 72871c19: ``faiss.normalize_L2`` of the
    index embeddings, line 76, and of the queries, line 194)."""
    texts = ["a kitchen", "a skateboarder", "tennis"]
    fused = clip_encoder.encode_fused(photos[:3], texts)
    raw_i, raw_t = clip_encoder._embed_images(photos[:3]), clip_encoder._embed_texts(texts)
    np.testing.assert_allclose(fused, l2_normalize(raw_i + raw_t), atol=1e-5)
    unit_sum = l2_normalize(clip_encoder.encode_images(photos[:3]) + clip_encoder.encode_texts(texts))
    assert np.abs(fused - unit_sum).max() > 1e-3  # not the sum of unit vectors


def test_encode_records_dispatches_by_modality(clip_encoder, photos, coco_mini):
    rel = str(photos[1].relative_to(coco_mini))
    recs = [Candidate(did="t", modality=Modality.TEXT, txt="a skateboard trick"),
            Candidate(did="i", modality=Modality.IMAGE, img_path=rel),
            Candidate(did="f", modality=Modality.IMAGE_TEXT, txt="a skateboard trick", img_path=rel)]
    v = clip_encoder.encode_records(recs, images_root=coco_mini)
    np.testing.assert_allclose(v[0], clip_encoder.encode_texts(["a skateboard trick"])[0], atol=1e-5)
    np.testing.assert_allclose(v[1], clip_encoder.encode_images([photos[1]])[0], atol=1e-5)
    raw = clip_encoder._embed_texts(["a skateboard trick"])[0] + clip_encoder._embed_images([photos[1]])[0]
    np.testing.assert_allclose(v[2], l2_normalize(raw), atol=1e-5)


def test_bad_image_path_names_the_file(clip_encoder, tmp_path):
    missing = tmp_path / "nope.jpg"
    with pytest.raises(InputError, match="nope.jpg"):
        clip_encoder.encode_images([missing])
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8 definitely not a jpeg")
    with pytest.raises(InputError, match="corrupt.jpg"):
        clip_encoder.encode_images([corrupt])


def test_missing_local_dir_is_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_encoder(str(tmp_path / "no-such-model"))


def test_dir_without_checkpoint_is_config_error(tmp_path):
    (tmp_path / "empty-model").mkdir()
    with pytest.raises(ConfigError, match="empty-model"):
        load_encoder(str(tmp_path / "empty-model"))


def test_unknown_hub_id_offline_is_config_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="no-such-org/no-such-clip-model"):
        load_encoder("no-such-org/no-such-clip-model")


def test_malformed_spec_is_config_error():
    with pytest.raises(ConfigError, match="neither"):
        load_encoder("not a model id!")


def test_bfloat16_cpu_runs_and_float16_cpu_refused(photos):
    enc = load_encoder(str(tiny_clip_dir()), dtype="bfloat16")
    v = enc.encode_images(photos[:2])
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert enc.config()["dtype"] == "bfloat16"
    with pytest.raises(ConfigError, match="float16"):
        load_encoder(str(tiny_clip_dir()), dtype="float16")


def test_siglip_checkpoint_loads_through_the_same_backend(photos):
    """SigLIP: no projection_dim in the config (dim is probed) and texts padded to a fixed length."""
    enc = load_encoder(str(tiny_siglip_dir()))
    cfg = enc.config()
    assert cfg["model_type"] == "siglip" and cfg["text_padding"] == "max_length" and enc.dim == 32
    t = enc.encode_texts(["a dog", "a tennis player serving in front of a crowd"])
    i = enc.encode_images(photos[:2])
    assert t.shape == (2, 32) and i.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(np.vstack([t, i]), axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(enc.encode_texts(["a dog"])[0], t[0], atol=1e-5)


def test_clip_checkpoint_preprocesses_as_openai(clip_encoder, photos):
    """A CLIP checkpoint whose processor is configured as OpenAI's transform (shortest edge = crop size,
    bicubic, /255, mean/std) is fed OpenAI's transform itself (openai/CLIP ``clip/clip.py`` ``_transform``,
    lines 58-65 at commit 0848ed71: torchvision's rounded centre-crop offset, where Hugging Face's processor
    floors it), and its texts get OpenAI's clean-up (``clip/simple_tokenizer.py`` at commit 2558ec83:
    ``basic_clean`` lines 50-53, ``whitespace_clean`` lines 56-59)."""
    import torch
    from PIL import Image

    from openai_clip_reference import openai_pixels

    ident = clip_encoder.identity()
    assert ident["image_preprocess"]["kind"] == "openai-clip" and ident["image_preprocess"]["crop_offset"] == "round"
    assert ident["text_cleaning"].startswith("openai-clip")
    pils = [Image.open(p).convert("RGB") for p in photos]
    pils += [im.rotate(90, expand=True) for im in pils] + [pils[0].resize((41, 29)), pils[1].resize((29, 43))]
    pixels = torch.from_numpy(np.stack([openai_pixels(im, 32) for im in pils]))
    with torch.inference_mode():
        out = clip_encoder.model.get_image_features(pixel_values=pixels)
    want = getattr(out, "pooler_output", out).numpy()
    np.testing.assert_allclose(clip_encoder.encode_images(pils), l2_normalize(want), atol=1e-5, rtol=0)
    np.testing.assert_allclose(clip_encoder.encode_texts(["Tom &amp; Jerry"]), clip_encoder.encode_texts(["Tom & Jerry"]),
                               atol=1e-6)


def test_other_processors_run_as_they_are():
    enc = load_encoder(str(tiny_siglip_dir()))
    assert enc.identity()["image_preprocess"]["kind"] == "hf-processor" and enc.identity()["text_cleaning"] is None
