"""The training-free joint image–text space of the offline encoder (pure numpy, no model weights).

all-MiniLM-L6-v2 (texts) and EfficientNet-Lite0 (images) share no space; two bridges that need no
training put them into one:

1. **Label bridge.** The image's ImageNet class probabilities weight the MiniLM embeddings of the class
   names ("a photo of a {name}."), placing it next to captions that mention what it shows; both sides are
   centred, else a few generic captions are the nearest to every image.
2. **ASIF relative representation** (Norelli et al. 2023): an image is its top-``k`` similarities to
   anchor images (PCA-reduced, so the shipped anchors stay small), a text to their captions.

The vector ``[sqrt(1-w) * bridge, sqrt(w) * asif]`` joins two unit blocks, so a dot product is
``(1-w) * cos_bridge + w * cos_asif``; ``benchmarks/bench_offline_encoder.py`` measures it.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from unirag.encoders.base import l2_normalize as _unit


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64) / temperature
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def relative_representation(sims: np.ndarray, k: int, power: float) -> np.ndarray:
    """ASIF: keep each row's top-``k`` (non-negative) similarities, raise to ``power``, L2-normalise."""
    s = np.maximum(np.asarray(sims, dtype=np.float32), 0.0)
    if 0 < k < s.shape[1]:
        kth = np.partition(s, -k, axis=1)[:, -k][:, None]
        s = np.where(s >= kth, s, 0.0)
    return _unit(s**power)


@dataclass(frozen=True)
class JointSpaceParams:
    k: int = 100
    power: float = 4.0
    temperature: float = 2.0
    asif_weight: float = 0.25
    pca_dim: int = 256
    class_prompt: str = "a photo of a {}."


@dataclass
class JointSpace:
    """Anchors and statistics that define the joint space; maps raw uni-modal features into it."""

    pca_mean: np.ndarray  # (1280,) mean pooled image feature of the anchor images
    pca_basis: np.ndarray  # (1280, pca_dim)
    anchor_images: np.ndarray  # (n_anchors, pca_dim), unit rows
    anchor_texts: np.ndarray  # (n_anchors, text_dim), unit rows
    class_texts: np.ndarray  # (1000, text_dim), unit rows: MiniLM("a photo of a {class}.")
    text_mean: np.ndarray  # (text_dim,) mean caption embedding, removed before comparing
    bridge_mean: np.ndarray  # (text_dim,) mean label-bridge vector of the anchor images
    params: JointSpaceParams = field(default_factory=JointSpaceParams)

    @property
    def dim(self) -> int:
        return int(self.class_texts.shape[1] + self.anchor_images.shape[0])

    @property
    def n_anchors(self) -> int:
        return int(self.anchor_images.shape[0])

    # -- mapping ---------------------------------------------------------------------------
    def _join(self, bridge_block: np.ndarray, asif_block: np.ndarray) -> np.ndarray:
        w = self.params.asif_weight
        return np.concatenate([np.sqrt(1 - w) * _unit(bridge_block), np.sqrt(w) * asif_block], axis=1)

    def image_vectors(self, pooled: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """Raw EfficientNet outputs (n, 1280) + (n, 1000) -> unit joint vectors (n, dim)."""
        bridge = _softmax(logits, self.params.temperature) @ self.class_texts - self.bridge_mean
        reduced = _unit((np.asarray(pooled, dtype=np.float32) - self.pca_mean) @ self.pca_basis)
        asif = relative_representation(reduced @ self.anchor_images.T, self.params.k, self.params.power)
        return self._join(bridge, asif)

    def text_vectors(self, text_emb: np.ndarray) -> np.ndarray:
        """MiniLM sentence embeddings (n, text_dim) -> unit joint vectors (n, dim)."""
        t = _unit(text_emb)
        asif = relative_representation(t @ self.anchor_texts.T, self.params.k, self.params.power)
        return self._join(t - self.text_mean, asif)

    # -- storage ---------------------------------------------------------------------------
    _ARRAYS = ("pca_mean", "pca_basis", "anchor_images", "anchor_texts", "class_texts", "text_mean", "bridge_mean")

    def save(self, npz_path: Path, meta: dict | None = None) -> None:
        """Write float16 arrays (``.npz``) and the parameters + provenance (``.json`` beside it)."""
        from unirag.runs.atomic import atomic_write_bytes, atomic_write_json

        buf = io.BytesIO()
        np.savez_compressed(buf, **{name: getattr(self, name).astype(np.float16) for name in self._ARRAYS})
        atomic_write_bytes(npz_path, buf.getvalue())
        atomic_write_json(npz_path.with_suffix(".json"), {"params": asdict(self.params), **(meta or {})})
        for p in (npz_path, npz_path.with_suffix(".json")):
            p.chmod(0o644)  # package data: readable by everyone (atomic writes create 0600 files)

    @classmethod
    def load(cls, npz_path: Path) -> JointSpace:
        meta = json.loads(npz_path.with_suffix(".json").read_text())
        with np.load(npz_path) as z:
            arrays = {name: z[name].astype(np.float32) for name in cls._ARRAYS}
        return cls(**arrays, params=JointSpaceParams(**meta["params"]))
