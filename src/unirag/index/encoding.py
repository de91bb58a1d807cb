"""Candidates -> vectors and metadata rows: what every build engine (local, Ray, one shard) shares.

Kept apart from :mod:`unirag.index.build` so that the shard and precomputed-embedding paths use it
without importing the build module that imports them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.images import BadImageReport, load_rgb
from unirag.data.records import Candidate, Modality, resolve_image
from unirag.errors import InputError


def encoder_info(encoder, spec: str | None) -> dict[str, Any]:
    """What the manifest records about the encoder (``spec`` is what the user typed, to reload it)."""
    return {"name": encoder.name, "spec": spec, "dim": int(encoder.dim), "config": encoder.config(),
            "fingerprint": encoder.fingerprint()}


def candidate_meta(c: Candidate) -> dict[str, Any]:
    """The metadata row the index keeps for a candidate."""
    return {"did": c.did, "txt": c.txt, "img_path": c.img_path, "source_id": c.source_id, "src_content": c.src_content}


class ChunkEncoder:
    """Decode + encode one chunk of same-modality candidates, skipping unreadable images."""

    def __init__(self, encoder, images_root: str | Path | None, bad: BadImageReport) -> None:
        self.encoder = encoder
        self.images_root = images_root
        self.bad = bad

    def __call__(self, modality: Modality, chunk: list[Candidate]) -> tuple[list[Candidate], np.ndarray]:
        if modality is Modality.TEXT:
            return chunk, self.encoder.encode_texts([c.txt for c in chunk])
        kept, images = [], []
        for c in chunk:
            path = resolve_image(c.img_path, self.images_root)
            try:
                images.append(load_rgb(path))
            except InputError as e:
                self.bad.add(path, e.reason)
                continue
            kept.append(c)
        if not kept:
            return [], np.zeros((0, self.encoder.dim), dtype=np.float32)
        if modality is Modality.IMAGE:
            return kept, self.encoder.encode_images(images)
        return kept, self.encoder.encode_fused(images, [c.txt for c in kept])
