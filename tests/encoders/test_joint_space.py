"""The numpy joint space: ASIF sparsification, block weighting, anchor removal, float16 storage."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from unirag.encoders.joint_space import JointSpace, JointSpaceParams, relative_representation

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from build_offline_anchors import joint_space_from_anchors  # noqa: E402


def test_relative_representation_keeps_top_k_and_is_unit():
    rng = np.random.default_rng(0)
    sims = rng.uniform(-0.2, 1.0, size=(4, 50)).astype(np.float32)
    r = relative_representation(sims, k=7, power=4.0)
    assert ((r > 0).sum(axis=1) <= 7).all()
    np.testing.assert_allclose(np.linalg.norm(r, axis=1), 1.0, atol=1e-6)
    # the kept entries are the 7 largest similarities, order preserved after the power
    for row, s in zip(r, sims, strict=True):
        assert set(np.flatnonzero(row)) == set(np.argsort(-s)[:7])


def test_negative_similarities_are_dropped():
    r = relative_representation(np.array([[-0.5, -0.1, 0.3]]), k=3, power=2.0)
    np.testing.assert_allclose(r, [[0.0, 0.0, 1.0]])


def _tiny_space(asif_weight: float) -> tuple[JointSpace, np.random.Generator]:
    rng = np.random.default_rng(1)
    n, d_img, d_txt = 40, 24, 12
    space = joint_space_from_anchors(
        anchor_pooled=rng.uniform(0, 6, size=(n, d_img)), anchor_logits=rng.normal(size=(n, 30)),
        anchor_text_emb=rng.normal(size=(n, d_txt)), class_text_emb=rng.normal(size=(30, d_txt)),
        caption_emb_for_mean=rng.normal(size=(100, d_txt)),
        params=JointSpaceParams(k=5, power=4.0, temperature=2.0, asif_weight=asif_weight, pca_dim=8),
    )
    return space, rng


def test_dot_product_is_weighted_sum_of_block_cosines():
    space, rng = _tiny_space(0.3)
    img = space.image_vectors(rng.uniform(0, 6, size=(3, 24)), rng.normal(size=(3, 30)))
    txt = space.text_vectors(rng.normal(size=(5, 12)))
    assert img.shape == (3, space.dim) == (3, 12 + 40)
    d = space.class_texts.shape[1]
    bridge_cos = (img[:, :d] / np.sqrt(0.7)) @ (txt[:, :d] / np.sqrt(0.7)).T
    asif_cos = (img[:, d:] / np.sqrt(0.3)) @ (txt[:, d:] / np.sqrt(0.3)).T
    np.testing.assert_allclose(img @ txt.T, 0.7 * bridge_cos + 0.3 * asif_cos, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1.0, atol=1e-5)


def test_save_load_roundtrip_float16(tmp_path):
    space, rng = _tiny_space(0.25)
    path = tmp_path / "space.npz"
    space.save(path, {"note": "test"})
    back = JointSpace.load(path)
    assert back.params == space.params
    x = rng.normal(size=(2, 12))
    np.testing.assert_allclose(back.text_vectors(x), space.text_vectors(x), atol=5e-3)


def test_load_missing_json_fails(tmp_path):
    space, _ = _tiny_space(0.25)
    path = tmp_path / "space.npz"
    space.save(path)
    path.with_suffix(".json").unlink()
    with pytest.raises(FileNotFoundError):
        JointSpace.load(path)
