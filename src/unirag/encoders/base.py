"""The encoder protocol and the behaviour every backend shares.

A backend implements :meth:`Encoder._embed_texts` and :meth:`Encoder._embed_images` (raw vectors);
this base class normalises, batches, fuses image+text inputs UniIR CLIP-SF style, and dispatches
records by modality. So the fusion and the modality handling exist once, not per backend.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.records import Candidate, Modality, Query, resolve_image

ImageInput = Any  # a path (str | Path) or a PIL image


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32, copy=False)


def fuse_score_level(image_vecs: np.ndarray, text_vecs: np.ndarray) -> np.ndarray:
    """UniIR CLIP-SF fusion: sum of the normalised image and text embeddings, renormalised.

    (BLIP-FF fuses *features* inside a cross-attention model and needs UniIR's own BLIP weights;
    it cannot be reproduced from a plain CLIP checkpoint, so it is not offered here.)
    """
    return l2_normalize(l2_normalize(image_vecs) + l2_normalize(text_vecs))


class Encoder(ABC):
    """Texts, images and image+text inputs -> L2-normalised float32 vectors of size ``dim``."""

    #: Stable identifier recorded in index manifests ("offline-asif", a HF id or a local path).
    name: str
    dim: int
    batch_size: int = 32

    @abstractmethod
    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Raw (unnormalised) embeddings of one batch of texts."""

    @abstractmethod
    def _embed_images(self, images: Sequence[ImageInput]) -> np.ndarray:
        """Raw embeddings of one batch of images (paths or PIL images)."""

    def config(self) -> dict[str, Any]:
        """Everything that changes the vectors; two encoders with equal fingerprints are interchangeable."""
        return {"name": self.name, "dim": self.dim}

    def fingerprint(self) -> str:
        blob = json.dumps(self.config(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # -- public API -------------------------------------------------------------------------
    def _batched(self, fn, items: Sequence, progress: bool, desc: str) -> np.ndarray:
        if len(items) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        from tqdm.auto import tqdm

        out = []
        starts = range(0, len(items), self.batch_size)
        for s in tqdm(starts, desc=desc, disable=not progress or len(items) <= self.batch_size, unit="batch"):
            out.append(np.asarray(fn(items[s : s + self.batch_size]), dtype=np.float32))
        return l2_normalize(np.concatenate(out, axis=0))

    def encode_texts(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self._batched(self._embed_texts, list(texts), progress, "encode texts")

    def encode_images(self, images: Sequence[ImageInput], progress: bool = False) -> np.ndarray:
        return self._batched(self._embed_images, list(images), progress, "encode images")

    def encode_fused(self, images: Sequence[ImageInput], texts: Sequence[str], progress: bool = False) -> np.ndarray:
        if len(images) != len(texts):
            raise ValueError(f"fused encoding needs as many images as texts ({len(images)} != {len(texts)})")
        return fuse_score_level(self.encode_images(images, progress), self.encode_texts(texts, progress))

    def encode_records(self, records: Sequence[Candidate | Query], images_root: str | Path | None,
                       progress: bool = False) -> np.ndarray:
        """Encode queries or candidates of any modality mix, keeping their order."""
        out = np.zeros((len(records), self.dim), dtype=np.float32)
        groups: dict[Modality, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(r.modality, []).append(i)
        for modality, idx in groups.items():
            texts = [records[i].txt or "" for i in idx]
            imgs = [resolve_image(records[i].img_path, images_root) for i in idx]
            if modality is Modality.TEXT:
                vecs = self.encode_texts(texts, progress)
            elif modality is Modality.IMAGE:
                vecs = self.encode_images(imgs, progress)
            else:
                vecs = self.encode_fused(imgs, texts, progress)
            out[idx] = vecs
        return out
