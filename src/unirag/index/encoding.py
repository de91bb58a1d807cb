"""Candidates -> vectors and metadata rows: what every build engine (local, Ray, one shard) shares,
and the ``"local"`` engine behind :meth:`unirag.Index.build`: one process streams the pool in
same-modality chunks of ``batch_size``, each decoded (bad images recorded and skipped), encoded and
handed to :class:`~unirag.index.writer.IndexWriter`: one chunk per modality in memory, never the
pool's images. The ``"ray"`` engine: :mod:`unirag.index.ray_engine`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.images import BadImageReport
from unirag.data.mbeir import duplicate_did, read_numbered_candidates
from unirag.data.records import Candidate, Modality, resolve_image
from unirag.index.writer import IndexWriter, source_record


def count_lines(path: Path) -> int:
    """Non-blank lines of a JSONL file: the candidates of a pool."""
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def pool_candidates(pool: Path | list[Candidate]) -> Iterator[Candidate]:
    """The candidates of a pool file (streamed) or list, in order; a repeated did is an error naming
    both its lines."""
    seen: dict[str, int | None] = {}
    pool_file = pool if isinstance(pool, Path) else None
    for lineno, c in read_numbered_candidates(pool) if pool_file else ((None, c) for c in pool):
        if c.did in seen:
            raise duplicate_did(c.did, lineno, seen[c.did], pool_file)
        seen[c.did] = lineno
        yield c


def candidate_meta(c: Candidate) -> dict[str, Any]:
    """The metadata row the index keeps for a candidate."""
    return {"did": c.did, "txt": c.txt, "img_path": c.img_path, "source_id": c.source_id, "src_content": c.src_content}


def modality_chunks(items: Iterable[Candidate], size: int) -> Iterator[tuple[Modality, list[Candidate]]]:
    """Candidates in pool order -> ``(modality, items)`` chunks of ``size`` same-modality items, each one out
    when full and the partial ones at the end: one pending chunk per modality in memory, whatever the pool."""
    pending: dict[Modality, list[Candidate]] = {}
    for item in items:
        m = item.modality
        pending.setdefault(m, []).append(item)
        if len(pending[m]) >= size:
            yield m, pending.pop(m)
    for m in list(pending):
        yield m, pending.pop(m)


def encode_chunks(encoder, items: Iterable[Candidate], batch_size: int, images_root: str | Path | None,
                  bad: BadImageReport, n_images: int | None = None
                  ) -> Iterator[tuple[Modality, list[Candidate], list[Candidate], Any]]:
    """Candidates in pool order, in :func:`modality_chunks` of ``batch_size`` (read ahead while the pool
    decodes) -> ``(modality, chunk, kept candidates, their vectors)``, in order, the images decoded ahead
    of the model by the encoder's image loader
    (:meth:`unirag.encoders.base.Encoder.image_loader`; ``n_images``: the whole job's, when known), an
    unreadable one skipped into ``bad``: the vectors, order and report of decoding inline, chunk by chunk."""

    jobs = (((m, chunk), [] if m is Modality.TEXT else [resolve_image(c.img_path, images_root)
                                                        for c in chunk])
            for m, chunk in modality_chunks(items, batch_size))
    loader = encoder.image_loader(n_images)
    for (modality, chunk), decoded in loader.map(jobs):
        if modality is Modality.TEXT:
            yield modality, chunk, chunk, encoder.encode_texts([c.txt for c in chunk])
            continue
        for path, reason in [(d.path, d.reason) for d in decoded if not d.ok]:
            bad.add(path, reason)
        kept = [c for c, d in zip(chunk, decoded, strict=True) if d.ok]
        images = [encoder.prepared(loader, d.image) for d in decoded if d.ok]
        if not kept:
            vectors = np.zeros((0, encoder.dim), dtype=np.float32)
        elif modality is Modality.IMAGE:
            vectors = encoder.encode_images(images)
        else:
            vectors = encoder.encode_fused(images, [c.txt for c in kept])
        del decoded, images  # before the next chunk is decoded: one chunk of images alive when inline
        yield modality, chunk, kept, vectors


def build_local(pool: Path | list[Candidate], images_root, out_dir, encoder, encoder_info, index_type,
                batch_size,
                params, progress, allow_shrink=False) -> dict[str, Any]:
    """Encode in this process and write the index; returns the manifest. ``pool``: a pool file
    (streamed) or the candidates themselves (the manifest then names no pool file); ``encoder_info``:
    what the manifest records about ``encoder``."""
    from tqdm.auto import tqdm

    total, pool_file = (count_lines(pool), str(pool)) if isinstance(pool, Path) else (len(pool), None)
    bad = BadImageReport()
    bar = tqdm(total=total, desc="index build", unit="cand", disable=not progress)
    with IndexWriter(out_dir, encoder.dim, encoder_info, index_type, params,
                     allow_shrink=allow_shrink) as writer:
        for modality, chunk, kept, vectors in encode_chunks(encoder, pool_candidates(pool), batch_size, images_root,
                                                            bad, total):
            writer.add(modality, [candidate_meta(c) for c in kept], vectors)
            bar.update(len(chunk))
        bar.close()
        return writer.commit(source_record(pool_file, images_root, bad.bad))
