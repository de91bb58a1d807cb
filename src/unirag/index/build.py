"""The two engines behind :meth:`unirag.Index.build`.

* ``"local"``: one process streams the pool in same-modality chunks of ``batch_size``, each decoded
  (bad images recorded and skipped), encoded and handed to :class:`~unirag.index.writer.IndexWriter`:
  one chunk per modality in memory, never the pool's images.
* ``"ray"``: the pool's shards not yet done (:mod:`unirag.index.shards`) are embedded on Ray Data
  (:mod:`unirag.index.ray_engine`), then the index is built from the shards folder; rerunning resumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unirag.data.images import BadImageReport
from unirag.data.records import Candidate
from unirag.index.encoding import candidate_meta, encode_chunks, encoder_info, modality_chunks
from unirag.index.shards import DEFAULT_SHARD_SIZE, count_lines, load_or_create_plan, missing_shards
from unirag.index.writer import IndexWriter, source_record


def default_shards_dir(out_dir: str | Path) -> Path:
    """Where the sharded engine keeps its shards unless told otherwise: ``<out_dir>/shards``."""
    return Path(out_dir) / "shards"


def build_with_ray(pool: Path, images_root, out_dir, encoder, encoder_spec, index_type, batch_size, params,
                   progress, allow_shrink, engine, dtype: str | None, autocast: str | None,
                   shards_dir: str | Path | None = None, shard_size: int = DEFAULT_SHARD_SIZE) -> dict[str, Any]:
    """Embed the shards of ``pool`` not yet done on Ray as ``engine`` (:class:`~unirag.runs.engine.EngineOptions`)
    says, ``encoder_spec`` loaded by each worker in ``dtype``/``autocast`` (see :mod:`unirag.index.ray_engine`),
    then build the index from the shards folder (default ``<out_dir>/shards``). Returns the manifest."""
    from dataclasses import replace

    from unirag.index import ray_engine
    from unirag.index.embeddings import build_from_embeddings

    shards_dir = Path(shards_dir) if shards_dir is not None else default_shards_dir(out_dir)
    info = encoder_info(encoder, encoder_spec)
    plan = load_or_create_plan(shards_dir, pool, info, shard_size=shard_size)
    todo = missing_shards(shards_dir, plan)
    if progress:
        print(f"shards: {plan.n_shards - len(todo)} of {plan.n_shards} already done, embedding {len(todo)} "
              f"on Ray", flush=True)
    engine = replace(engine, decode_workers=getattr(encoder, "decode_workers", None))  # the encoder's setting
    ray_engine.run_shards(shards_dir, todo, encoder_spec, images_root, engine, batch_size=batch_size,
                          dtype=dtype, autocast=autocast, progress=progress)
    manifest = build_from_embeddings(pool, shards_dir, out_dir, info, index_type=index_type, params=params,
                                     images_root=images_root, progress=progress, allow_shrink=allow_shrink)
    return manifest


def build_local(pool: Path | list[Candidate], images_root, out_dir, encoder, encoder_spec, index_type,
                batch_size,
                params, progress, allow_shrink=False) -> dict[str, Any]:
    """Encode in this process and write the index; returns the manifest. ``pool``: a pool file
    (streamed) or the candidates themselves (the manifest then names no pool file)."""
    from tqdm.auto import tqdm

    from unirag.index.encoding import pool_candidates

    total, pool_file = (count_lines(pool), str(pool)) if isinstance(pool, Path) else (len(pool), None)
    bad = BadImageReport()
    bar = tqdm(total=total, desc="index build", unit="cand", disable=not progress)
    with IndexWriter(out_dir, encoder.dim, encoder_info(encoder, encoder_spec), index_type, params,
                     allow_shrink=allow_shrink) as writer:
        chunks = modality_chunks(pool_candidates(pool), batch_size)  # read ahead while the pool decodes
        for modality, chunk, kept, vectors in encode_chunks(encoder, chunks, images_root, bad, total):
            writer.add(modality, [candidate_meta(c) for c in kept], vectors)
            bar.update(len(chunk))
        bar.close()
        return writer.commit(source_record(pool_file, images_root, bad.bad))
