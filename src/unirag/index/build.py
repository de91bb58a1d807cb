"""Build an index from an M-BEIR candidate pool, streaming.

The pool is read one line at a time; candidates are grouped per modality into chunks of
``batch_size``; each chunk's images are decoded once (bad ones are recorded and skipped), encoded,
and handed to :class:`~unirag.index.writer.IndexWriter`. At most one chunk per modality is held in
memory, never the pool's images.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.images import BadImageReport, load_rgb
from unirag.data.mbeir import read_candidates
from unirag.data.records import Candidate, Modality, resolve_image
from unirag.errors import InputError
from unirag.index.writer import IndexWriter

BAD_IMAGES_KEPT = 20


def encoder_info(encoder, spec: str | None) -> dict[str, Any]:
    """What the manifest records about the encoder (``spec`` is what the user typed, to reload it)."""
    return {"name": encoder.name, "spec": spec, "dim": int(encoder.dim), "config": encoder.config(),
            "fingerprint": encoder.fingerprint()}


def _meta(c: Candidate) -> dict[str, Any]:
    return {"did": c.did, "txt": c.txt, "img_path": c.img_path, "source_id": c.source_id}


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


class _ChunkEncoder:
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


def build_index(pool: str | Path | Iterable[Candidate], images_root: str | Path | None, out_dir: str | Path,
                encoder, encoder_spec: str | None = None, index_type: str = "flat", batch_size: int = 64,
                params: dict[str, Any] | None = None, progress: bool = True) -> dict[str, Any]:
    """Encode every candidate of ``pool`` and write an index to ``out_dir`` (atomically). Returns the manifest.

    ``pool`` is a pool JSONL file (streamed) or candidates in memory (the manifest then records no pool file).
    """
    from tqdm.auto import tqdm

    if batch_size <= 0:
        raise InputError(f"batch size must be positive, got {batch_size}", field="batch_size")
    if isinstance(pool, str | Path):
        pool = Path(pool)
        if not pool.exists():
            raise InputError("candidate pool not found", path=pool)
        candidates, total, pool_file = read_candidates(pool), _count_lines(pool), str(pool)
    else:
        candidates = list(pool)
        total, pool_file = len(candidates), None
    bad = BadImageReport()
    encode_chunk = _ChunkEncoder(encoder, images_root, bad)
    pending: dict[Modality, list[Candidate]] = {}
    seen: set[str] = set()
    with IndexWriter(out_dir, encoder.dim, encoder_info(encoder, encoder_spec), index_type, params) as writer:

        def flush(modality: Modality) -> None:
            kept, vectors = encode_chunk(modality, pending.pop(modality))
            writer.add(modality, [_meta(c) for c in kept], vectors)

        bar = tqdm(total=total, desc="index build", unit="cand", disable=not progress)
        for c in candidates:
            if c.did in seen:
                raise InputError(f"duplicate did {c.did!r} in the candidate pool", path=pool_file, field="did")
            seen.add(c.did)
            pending.setdefault(c.modality, []).append(c)
            if len(pending[c.modality]) >= batch_size:
                flush(c.modality)
            bar.update(1)
        for modality in list(pending):
            flush(modality)
        bar.close()
        extra = {"pool": pool_file, "images_root": str(images_root) if images_root else None,
                 "bad_images": {"count": len(bad), "first": [{"path": p, "reason": r}
                                                             for p, r in bad.bad[:BAD_IMAGES_KEPT]]}}
        return writer.commit(extra)


def build_from_vectors(chunks: Iterable[tuple[Modality, list[dict[str, Any]], np.ndarray]], out_dir: str | Path,
                       dim: int, encoder_info_: dict[str, Any], index_type: str = "flat",
                       params: dict[str, Any] | None = None,
                       on_chunk: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Same streaming + atomic path from precomputed vectors (used by the benchmark and by tests)."""
    with IndexWriter(out_dir, dim, encoder_info_, index_type, params) as writer:
        for i, (modality, metas, vectors) in enumerate(chunks):
            writer.add(modality, metas, vectors)
            if on_chunk is not None:
                on_chunk(i)
        return writer.commit()
