"""Candidates -> vectors and metadata rows: what every build engine (local, Ray, one shard) shares.

Kept apart from :mod:`unirag.index.build` so that the shard and precomputed-embedding paths use it
without importing the build module that imports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from unirag.data.images import BadImageReport
from unirag.data.records import Candidate, Modality, resolve_image

K = TypeVar("K")


def encoder_info(encoder, spec: str | None) -> dict[str, Any]:
    """What the manifest records about the encoder (``spec`` is what the user typed, to reload it)."""
    return {"name": encoder.name, "spec": spec, "dim": int(encoder.dim), "config": encoder.config(),
            "fingerprint": encoder.fingerprint()}


def candidate_meta(c: Candidate) -> dict[str, Any]:
    """The metadata row the index keeps for a candidate."""
    return {"did": c.did, "txt": c.txt, "img_path": c.img_path, "source_id": c.source_id, "src_content": c.src_content}


class ChunkEncoder:
    """Decode + encode chunks of same-modality candidates, skipping (and reporting) unreadable images.

    :meth:`stream` decodes the images of the chunks ahead of the model in the encoder's image loader
    (:meth:`unirag.encoders.base.Encoder.image_loader`) and yields the chunks in their order, so the
    vectors, the order and the skipped-image report are those of decoding inline, one chunk at a time.
    ``n_images``: how many images the whole job has, when known (``auto`` decodes small jobs inline).
    """

    def __init__(self, encoder, images_root: str | Path | None, bad: BadImageReport,
                 n_images: int | None = None) -> None:
        self.encoder = encoder
        self.images_root = images_root
        self.bad = bad
        self.n_images = n_images

    def __call__(self, modality: Modality, chunk: list[Candidate]) -> tuple[list[Candidate], np.ndarray]:
        for _, _, _, kept, vectors in self.stream([(None, modality, chunk)]):
            return kept, vectors
        raise AssertionError("unreachable")

    def stream(self, chunks: Iterable[tuple[K, Modality | None, list[Candidate]]]
               ) -> Iterator[tuple[K, Modality | None, list[Candidate], list[Candidate], np.ndarray | None]]:
        """``(key, modality, chunk)`` -> ``(key, modality, chunk, kept candidates, their vectors)``, in
        order. A chunk with modality None is a marker for the caller, passed through (vectors None)."""
        encoder = self.encoder

        def jobs():
            for key, modality, chunk in chunks:
                paths = [] if modality in (None, Modality.TEXT) else [resolve_image(c.img_path, self.images_root)
                                                                     for c in chunk]
                yield (key, modality, chunk), paths

        loader = encoder.image_loader(self.n_images)
        for (key, modality, chunk), decoded in loader.map(jobs()):
            if modality is None:
                yield key, None, chunk, [], None
                continue
            kept, vectors = self._encode(loader, modality, chunk, decoded)
            del decoded  # before the next chunk is decoded: one chunk of images alive when inline
            yield key, modality, chunk, kept, vectors

    def _encode(self, loader, modality: Modality, chunk: list[Candidate], decoded
                ) -> tuple[list[Candidate], np.ndarray]:
        encoder = self.encoder
        if modality is Modality.TEXT:
            return chunk, encoder.encode_texts([c.txt for c in chunk])
        kept, images = [], []
        for c, d in zip(chunk, decoded, strict=True):
            if not d.ok:
                self.bad.add(d.path, d.reason)
                continue
            kept.append(c)
            images.append(encoder.prepared(loader, d.image))
        if not kept:
            return [], np.zeros((0, encoder.dim), dtype=np.float32)
        if modality is Modality.IMAGE:
            return kept, encoder.encode_images(images)
        return kept, encoder.encode_fused(images, [c.txt for c in kept])
