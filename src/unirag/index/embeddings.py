"""Bring your own embeddings: build an index from precomputed vectors aligned to pool ids.

Sources (``--embeddings PATH``): a ``.npy`` matrix whose row ``r`` is line ``r`` of ``--ids`` (or,
without it, the pool's ``r``-th candidate); a Parquet file with an ``id``/``did`` column and an
``embedding`` list column (clip-retrieval style; needs ``pyarrow``); or a folder of them, each
``.npy`` with a ``.ids`` file of the same stem (what :mod:`unirag.index.shards` writes).

Every vector is checked (size, finite, non-zero) and L2-normalised (the index searches by cosine);
every id must be a pool candidate, once; every candidate needs a vector, except images a shard
recorded as unreadable. Errors name the file and the row. Sources may list ids in any order: rows are
placed at their pool position in a raw file inside the new data folder (deleted before the commit; a
killed build's folder goes like any dead build's), then the pool is streamed in order to the writer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.mbeir import read_candidates
from unirag.data.text import iter_text_lines
from unirag.errors import ConfigError, InputError
from unirag.index.store import RawVectors
from unirag.index.writer import IndexWriter, source_record

ID_COLUMNS = ("id", "did")
EMBEDDING_COLUMN = "embedding"
CHUNK = 8192


def _npy_blocks(path: Path, ids_path: Path | None, pool_ids: list[str], pool: Path
                ) -> Iterator[tuple[list[str], np.ndarray, int]]:
    """Blocks of a ``.npy`` matrix whose row ``r`` is line ``r`` of ``ids_path``, else ``pool_ids[r]``."""
    ids = pool_ids
    if ids_path is not None:
        if not ids_path.is_file():
            raise InputError("ids file not found", path=ids_path)
        ids = []
        for lineno, line in iter_text_lines(ids_path):
            ids.append(line.rstrip("\n").rstrip("\r"))
            if not ids[-1].strip():
                raise InputError("empty id line (one candidate id per line, no blank lines)", path=ids_path,
                                 line=lineno)
    try:
        matrix = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as e:
        raise InputError(f"cannot read .npy matrix ({e})", path=path) from None
    if matrix.ndim != 2:
        raise InputError(f"expected a 2-d matrix (rows, dim), got shape {matrix.shape}", path=path)
    if len(ids) != len(matrix):
        raise InputError(f"{len(matrix)} rows in {path.name} but {len(ids)} ids", path=ids_path or pool)
    for s in range(0, len(matrix), CHUNK):
        yield ids[s : s + CHUNK], np.asarray(matrix[s : s + CHUNK]), s


def _parquet_blocks(path: Path) -> Iterator[tuple[list[str], np.ndarray, int]]:
    try:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("reading Parquet embeddings needs pyarrow: pip install 'unirag[ray]' or pyarrow") from None
    try:
        reader = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for unreadable files
        raise InputError(f"cannot read Parquet file ({e})", path=path) from None
    names = reader.schema_arrow.names
    id_col = next((c for c in ID_COLUMNS if c in names), None)
    if id_col is None:
        raise InputError(f"no id column (expected one of {', '.join(ID_COLUMNS)}; found {', '.join(names)})",
                         path=path, field="id")
    if EMBEDDING_COLUMN not in names:
        raise InputError(f"no '{EMBEDDING_COLUMN}' column (found {', '.join(names)})", path=path,
                         field=EMBEDDING_COLUMN)
    first = 0
    for batch in reader.iter_batches(batch_size=CHUNK, columns=[id_col, EMBEDDING_COLUMN]):
        ids_arr, emb = batch.column(0), batch.column(1)
        for column, field, what in ((ids_arr, id_col, "id"), (emb, EMBEDDING_COLUMN, "embedding")):
            if column.null_count:
                row = first + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
                raise InputError(f"row {row}: missing {what}", path=path, field=field)
        lengths = pc.list_value_length(emb).to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths != lengths[0]).any():
            row = first + int(np.flatnonzero(lengths != lengths[0])[0])
            raise InputError(f"row {row}: embedding has {lengths[row - first]} values, earlier rows have "
                             f"{lengths[0]}", path=path, field=EMBEDDING_COLUMN)
        dim = int(lengths[0]) if len(lengths) else 0
        values = emb.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(lengths), dim)
        yield [str(x) for x in ids_arr.to_pylist()], values, first
        first += len(lengths)


def _sources(path: Path, ids_path: Path | None) -> list[tuple[Path, Path | None]]:
    """(data file, ids file) pairs of a source path, in a stable order."""
    if path.is_dir():
        if ids_path is not None:
            raise ConfigError("--ids applies to a single .npy file, not to a folder of shards")
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".parquet") and not p.name.startswith("."))
        if not files:
            raise InputError("no .npy or .parquet embedding files in the folder", path=path)
        for f in files:
            if f.suffix == ".npy" and not f.with_suffix(".ids").is_file():
                raise InputError(f"no ids file {f.with_suffix('.ids').name} next to {f.name} (one candidate "
                                 "id per line)", path=f)
        return [(f, f.with_suffix(".ids") if f.suffix == ".npy" else None) for f in files]
    if not path.is_file():
        raise InputError("embeddings not found", path=path)
    if path.suffix not in (".npy", ".parquet"):
        raise InputError("embeddings must be a .npy matrix, a .parquet file or a folder of them", path=path)
    if path.suffix == ".parquet" and ids_path is not None:
        raise ConfigError("--ids applies to a .npy matrix; a Parquet file carries its own id column")
    return [(path, ids_path)]


def build_from_embeddings(pool: str | Path, embeddings: str | Path, out_dir: str | Path,
                          encoder_info: dict[str, Any] | None, ids: str | Path | None = None,
                          index_type: str = "flat", params: dict[str, Any] | None = None,
                          images_root: str | Path | None = None, progress: bool = True,
                          allow_shrink: bool = False) -> dict[str, Any]:
    """Build an index at ``out_dir`` from precomputed vectors of the candidates of ``pool``.

    ``encoder_info`` is what the manifest records about the model that made the vectors (name, spec, dim,
    config, fingerprint; its ``dim`` must match the vectors), or None when no
    unirag encoder made them (queries must then be given as vectors). ``allow_shrink``: see
    :meth:`unirag.Index.build`. Returns the manifest.
    """
    from tqdm.auto import tqdm

    from unirag.index.encoding import candidate_meta, modality_chunks, pool_candidates
    from unirag.index.factory import resolve_params
    from unirag.index.shards import PLAN, done_record, read_plan

    resolve_params(index_type, params)  # a bad option fails before any vector is read
    pool, embeddings = Path(pool), Path(embeddings)
    bad: dict[str, dict[str, str]] = {}  # did -> its image the sharded engine could not read (*.done.json)
    if embeddings.is_dir() and (embeddings / PLAN).exists():
        # a planned shards folder must be complete and made by encoder_info's encoder (when given); it
        # records its own
        plan = read_plan(embeddings)
        records = [done_record(embeddings, i) for i in range(plan.n_shards)]
        todo = [i for i, record in enumerate(records) if record is None]
        if todo:
            listed = ", ".join(f"{i}/{plan.n_shards}" for i in todo[:10]) + (" ..." if len(todo) > 10 else "")
            raise InputError(f"{len(todo)} of {plan.n_shards} shards are not embedded yet ({listed}); run them "
                             "(--shard i/n, or --engine ray) first", path=embeddings)
        planned = plan.encoder
        if encoder_info is not None and encoder_info["fingerprint"] != planned.get("fingerprint"):
            raise ConfigError(f"encoder {encoder_info.get('spec') or encoder_info.get('name')!r} is not the encoder "
                              f"these shards were made with ({planned.get('name')!r}, spec {planned.get('spec')!r})")
        bad = {item["did"]: item for record in records for item in record.get("bad_images", [])}
        encoder_info = encoder_info or planned
    sources = _sources(embeddings, Path(ids) if ids is not None else None)
    positions = {c.did: i for i, c in enumerate(pool_candidates(pool))}
    n = len(positions)
    if n == 0:
        raise InputError("nothing to index: the pool has no usable candidates", path=pool)
    dim = int(encoder_info["dim"]) if encoder_info and encoder_info.get("dim") else None
    with contextlib.ExitStack() as stack:
        writer: IndexWriter | None = None
        present = np.zeros(n, dtype=bool)
        bar = tqdm(total=n, desc="embeddings", unit="vec", disable=not progress)
        for data_file, ids_file in sources:
            # a .npy without ids (one file, no --ids: a folder's have theirs) is in the pool's order
            blocks = _npy_blocks(data_file, ids_file, list(positions), pool) if data_file.suffix == ".npy" \
                else _parquet_blocks(data_file)
            for block_ids, vectors, first in blocks:
                if vectors.shape[1] != (dim or vectors.shape[1]):
                    raise InputError(f"row {first}: embedding has {vectors.shape[1]} dimensions, expected {dim}"
                                     + (" (the encoder's)" if encoder_info else " (the first file's)"),
                                     path=data_file)
                dim = dim or int(vectors.shape[1])
                if writer is None:  # the aligned vectors live in the new data folder until the commit
                    info = encoder_info or {"name": "external", "spec": None, "dim": dim, "config": {},
                                            "fingerprint": None}
                    writer = stack.enter_context(IndexWriter(out_dir, dim, info, index_type, params,
                                                             allow_shrink=allow_shrink))
                    # deleted before the commit: the writer hashes every file of the folder
                    aligned = RawVectors(writer.folder / ".aligned.f32", n, dim, create=True)
                    stack.callback(aligned.close, delete=True)
                vectors = np.asarray(vectors, dtype=np.float32)
                finite = np.isfinite(vectors).all(axis=1)
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                for r in np.flatnonzero(~finite | (norms[:, 0] == 0))[:1].tolist():
                    what = "is all zeros" if finite[r] else "is not finite (NaN or inf)"
                    raise InputError(f"row {first + r} (id {block_ids[r]!r}): embedding {what}", path=data_file)
                rows = np.empty(len(block_ids), dtype=np.int64)  # their pool positions
                for r, did in enumerate(block_ids):
                    pos = positions.get(did)
                    if pos is None or present[pos]:  # unknown or repeated: the error names file and row
                        why = "is not a candidate of the pool" if pos is None else "has more than one embedding"
                        raise InputError(f"row {first + r}: id {did!r} {why}", path=ids_file or data_file,
                                         line=first + r + 1 if ids_file else None)
                    present[pos], rows[r] = True, pos
                aligned.write(rows, vectors / norms)
                bar.update(len(rows))
        bar.close()
        unexplained = [did for did, pos in positions.items() if not present[pos] and did not in bad]
        if unexplained:
            raise InputError(f"{len(unexplained)} pool candidate(s) have no embedding, first {unexplained[0]!r}",
                             path=embeddings)
        extra = source_record(pool, images_root, [(b["path"], b["reason"]) for b in bad.values()],
                              embeddings=str(embeddings))
        items = (c for pos, c in enumerate(read_candidates(pool)) if present[pos])  # the pool, in order
        for modality, chunk in modality_chunks(items, CHUNK):
            rows = aligned.rows(np.array([positions[c.did] for c in chunk]))
            writer.add(modality, [candidate_meta(c) for c in chunk], rows)
        aligned.close(delete=True)
        return writer.commit(extra)

