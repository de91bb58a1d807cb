"""The offline default encoder on real COCO photos and captions.

The shipped anchors leave out the first 48 photos of coco-val2017-mini and the demo sample's photos
(see the asset metadata), so retrieval on those photos measures the joint space, not anchor look-up.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import unirag
from unirag.encoders.base import l2_normalize
from unirag.encoders.offline import OfflineEncoder, asset_metadata, asset_path, load_joint_space
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError, InputError


@pytest.fixture(scope="module")
def encoder() -> OfflineEncoder:
    return load_encoder(None)


@pytest.fixture(scope="module")
def held_out(coco_mini: Path) -> list[dict]:
    """The COCO-mini photos that are not anchors of the shipped joint space."""
    held_ids = set(asset_metadata()["held_out_coco_image_ids"])
    rows = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines() if x]
    rows = [r for r in rows if r["image_id"] in held_ids]
    assert len(rows) >= 48
    return rows[:48]


@pytest.fixture(scope="module")
def held_out_vectors(encoder, held_out, coco_mini):
    images = encoder.encode_images([coco_mini / r["image"] for r in held_out])
    captions = encoder.encode_texts([c for r in held_out for c in r["captions"]])
    owner = np.repeat(np.arange(len(held_out)), 5)
    return images, captions, owner


def test_default_names_give_offline_encoder(encoder):
    assert isinstance(encoder, OfflineEncoder)
    assert isinstance(load_encoder("offline"), OfflineEncoder)
    cfg = encoder.config()
    assert cfg["backend"] == "offline" and cfg["dim"] == encoder.dim
    assert cfg["n_anchors"] == 3000 + 159 - len(asset_metadata()["held_out_coco_image_ids"])


def test_assets_live_inside_the_package():
    package_dir = Path(unirag.__file__).resolve().parent
    p = asset_path().resolve()
    assert package_dir in p.parents and p.exists()
    assert p.stat().st_size < 8_000_000
    with np.load(p) as z:
        assert all(z[name].dtype == np.float16 for name in z.files)
    meta = asset_metadata()
    held = {f"coco:{i}" for i in meta["held_out_coco_image_ids"]}
    assert len(meta["anchor_ids"]) == load_joint_space().n_anchors
    assert held.isdisjoint(meta["anchor_ids"])
    demo = Path(unirag.__file__).parent / "demo" / "data" / "captions.json"
    if demo.exists():  # the bundled demo photos must not be anchors (the demo would show leaked retrieval)
        assert {f"coco:{im['id']}" for im in json.loads(demo.read_text())["images"]} <= held


def test_shapes_dtype_and_unit_norm(encoder, held_out_vectors):
    images, captions, _ = held_out_vectors
    assert images.shape == (48, encoder.dim) and captions.shape == (240, encoder.dim)
    assert images.dtype == np.float32 and captions.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(images, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(captions, axis=1), 1.0, atol=1e-5)


def test_own_captions_outrank_other_photos_captions(held_out_vectors):
    """Real photos vs real captions, none of them anchors: the own captions must score higher on average."""
    images, captions, owner = held_out_vectors
    sims = images @ captions.T
    own = sims[owner[None, :] == np.arange(len(images))[:, None]].reshape(len(images), 5).mean(axis=1)
    other = np.array([sims[i, owner != i].mean() for i in range(len(images))])
    assert (own > other).mean() >= 0.9
    # mean rank of the best own caption among 240 (chance ~ 40)
    ranks = (-sims).argsort(axis=1).argsort(axis=1)
    best_rank = np.array([ranks[i, owner == i].min() for i in range(len(images))])
    assert np.median(best_rank) <= 5


def test_retrieval_beats_chance_by_a_margin(held_out_vectors):
    images, captions, owner = held_out_vectors
    sims = images @ captions.T
    top5 = np.argsort(-sims, axis=1)[:, :5]
    i2t_hit5 = np.mean([(owner[t] == i).any() for i, t in enumerate(top5)])  # chance ~ 0.10
    t2i_r5 = np.mean([i in np.argsort(-sims[:, j])[:5] for j, i in enumerate(owner)])  # chance 5/48 ~ 0.10
    assert i2t_hit5 >= 0.5, i2t_hit5
    assert t2i_r5 >= 0.5, t2i_r5


def test_vectors_do_not_depend_on_batch_composition(encoder, held_out, coco_mini):
    paths = [coco_mini / r["image"] for r in held_out[:5]]
    alone = encoder.encode_images([paths[3]])[0]
    np.testing.assert_allclose(encoder.encode_images(paths)[3], alone, atol=1e-5)
    caps = [held_out[0]["captions"][0], "a very long caption " * 10, "dog"]
    np.testing.assert_allclose(encoder.encode_texts(caps)[2], encoder.encode_texts(["dog"])[0], atol=1e-5)


def test_fused_is_normalised_sum(encoder, held_out, coco_mini):
    paths = [coco_mini / r["image"] for r in held_out[:3]]
    texts = ["in black and white", "at night", "with more people"]
    fused = encoder.encode_fused(paths, texts)
    expected = l2_normalize(encoder.encode_images(paths) + encoder.encode_texts(texts))
    np.testing.assert_allclose(fused, expected, atol=1e-5)


def test_bad_image_path_names_the_file(encoder, tmp_path):
    with pytest.raises(InputError, match="missing-photo.jpg"):
        encoder.encode_images([tmp_path / "missing-photo.jpg"])
    broken = tmp_path / "truncated.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(InputError, match="truncated.jpg"):
        encoder.encode_images([broken])


def test_missing_assets_is_config_error(tmp_path, monkeypatch):
    import unirag.encoders.offline as offline

    monkeypatch.setattr(offline, "asset_path", lambda: tmp_path / "nothing.npz")
    load_joint_space.cache_clear()
    try:
        with pytest.raises(ConfigError, match="assets missing"):
            OfflineEncoder()
    finally:
        load_joint_space.cache_clear()


def test_wrong_fused_lengths_rejected(encoder, held_out, coco_mini):
    with pytest.raises(ValueError, match="as many images as texts"):
        encoder.encode_fused([coco_mini / held_out[0]["image"]], ["a", "b"])
