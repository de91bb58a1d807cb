"""Write an index directory incrementally, then publish it atomically.

Flat and HNSW vectors go straight into the current FAISS shard, written out and freed at
``shard_size`` vectors; IVF-PQ vectors are spilled to a raw float32 file (IVF-PQ must be trained
before vectors are added), trained on a bounded sample, then added shard by shard. Peak memory is one
shard (flat/HNSW) or the compressed codes (IVF-PQ), never the whole pool.

Everything goes into a new data folder; :meth:`IndexWriter.commit` publishes it by replacing
``manifest.json`` atomically (:mod:`unirag.index.directory`), so an exception or a kill before that
leaves the previous index readable. A rebuild that would lose a modality, or more than the
``index_max_shrink`` setting's share of one, is refused unless ``allow_shrink`` (:func:`check_shrink`):
a pool whose image folder vanished must not quietly become a text-only index.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from unirag.data.records import Modality
from unirag.errors import ConfigError, InputError
from unirag.index import factory
from unirag.index.directory import BuildSlot
from unirag.index.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    read_manifest,
    sha256_file,
)
from unirag.index.store import RawVectors

SPILL_CHUNK = 65536
#: Skipped images the manifest lists by name (all are counted).
BAD_IMAGES_KEPT = 20


def source_record(pool: str | Path | None, images_root: str | Path | None, bad: list[tuple[str, str]],
                  **more: Any) -> dict[str, Any]:
    """What the manifest records of the build's input: pool file, images root, skipped images (path, reason)."""
    return {"pool": str(pool) if pool else None, **more, "images_root": str(images_root) if images_root else None,
            "bad_images": {"count": len(bad), "first": [{"path": p, "reason": r} for p, r in bad[:BAD_IMAGES_KEPT]]}}


class _SubIndex:
    """The part of the build for one modality: FAISS shards (or a spill file for IVF-PQ)."""

    def __init__(self, folder: Path, modality: Modality, dim: int, index_type: str, params: dict[str, Any]) -> None:
        self.folder = folder
        self.dim = dim
        self.index_type = index_type
        self.params = params
        self.shard_size = int(params["shard_size"])
        self.count = 0
        self.shards: list[dict[str, Any]] = []
        self.current = None
        self.stem = modality.value.replace(",", "_")  # file-name-safe: "image,text" -> "image_text"
        self.spill_path = folder / f"{self.stem}.vectors.f32"
        self.spill_fh = self.spill_path.open("wb") if index_type == "ivfpq" else None

    def add(self, vectors: np.ndarray) -> None:
        self.count += len(vectors)
        if self.spill_fh is not None:
            self.spill_fh.write(vectors.tobytes())
            return
        start = 0
        while start < len(vectors):
            if self.current is None:
                self.current = factory.new_index(self.index_type, self.dim, self.params)
            take = min(len(vectors) - start, self.shard_size - self.current.ntotal)
            self.current.add(vectors[start : start + take])
            start += take
            if self.current.ntotal >= self.shard_size:
                self._write_shard(self.current)
                self.current = None

    def _write_shard(self, index) -> None:
        name = f"{self.stem}.{len(self.shards):05d}.faiss"
        target = self.folder / name
        try:
            faiss.write_index(index, str(target))
        except RuntimeError as e:  # FAISS reports a failed write as "... write error ...: 28 (<strerror>)"
            m = re.search(r"\(([^()]+)\)\s*$", str(e))
            reason = m.group(1) if m else str(e)
            code = next((c for c in errno.errorcode if os.strerror(c) == reason),
                        errno.ENOSPC if "space" in reason.lower() else errno.EIO)
            raise OSError(code, os.strerror(code), str(target)) from e
        self.shards.append({"file": name, "count": int(index.ntotal)})

    def finish(self) -> dict[str, Any]:
        """Write the remaining shard(s); returns this sub-index's manifest entry. IVF-PQ is trained once on a
        bounded sample of the spilled vectors, then filled shard after shard."""
        if self.spill_fh is None:
            if self.current is not None:
                self._write_shard(self.current)
            return {"count": self.count, "type": self.index_type, "params": dict(self.params),
                    "shards": self.shards, "vectors_file": None}
        self.spill_fh.close()
        n = self.count
        raw = RawVectors(self.spill_path, n, self.dim)
        if n < factory.IVFPQ_MIN_COUNT:
            params = {"reason": f"ivfpq needs >= {factory.IVFPQ_MIN_COUNT} vectors, got {n}",
                      "shard_size": self.shard_size}
            trained = None
        else:
            params = factory.ivfpq_shape(n, self.dim, self.params)
            trained = factory.new_index("ivfpq", self.dim, params)
            rows = np.random.default_rng(0).choice(n, size=min(n, int(params["train_size"])), replace=False)
            trained.train(raw.rows(np.sort(rows)))
        for first in range(0, n, self.shard_size):
            last = min(n, first + self.shard_size)
            index = faiss.clone_index(trained) if trained is not None else factory.new_index("flat", self.dim)
            for start in range(first, last, SPILL_CHUNK):
                index.add(raw.block(start, min(last, start + SPILL_CHUNK)))
            if trained is not None and not params["refine"]:
                index.make_direct_map()  # stored vectors stay reconstructable (from the codes) without raw vectors
            self._write_shard(index)
            del index
        keep = trained is not None and params["refine"]  # re-scoring reads rows of it
        raw.close(delete=not keep)
        return {"count": n, "type": "flat" if trained is None else "ivfpq", "params": params, "shards": self.shards,
                "vectors_file": self.spill_path.name if keep else None}


def check_shrink(index_dir: Path, counts: dict[str, int], extra: dict[str, Any] | None = None) -> None:
    """Refuse (:class:`~unirag.errors.ConfigError`) to replace the index at ``index_dir`` with one of
    ``counts`` (modality -> candidates) that loses a modality, or more than the ``index_max_shrink``
    setting's share of a modality's candidates. Nothing to compare (no index there yet, or one that
    cannot be read) passes."""
    from unirag.profiles import SETTINGS

    try:
        old = {m: int(e["count"]) for m, e in read_manifest(index_dir)["subindexes"].items()}
    except (InputError, KeyError, TypeError, ValueError):
        return  # no index there yet, or a damaged one: not a reference
    max_shrink = float(SETTINGS["index_max_shrink"].default)
    lost = [f"all {n} {m} candidates" if not counts.get(m) else f"{n - counts[m]} of {n} {m} candidates"
            for m, n in old.items() if n and counts.get(m, 0) < n * (1 - max_shrink)]
    if not lost:
        return
    bad = (extra or {}).get("bad_images") or {}
    why = ""
    if bad.get("count"):
        first = (bad.get("first") or [{}])[0]
        why = f"; {bad['count']} image(s) were missing or unreadable (first: {first.get('path')}: {first.get('reason')})"
    describe = lambda c: ", ".join(f"{m} {n}" for m, n in c.items())  # noqa: E731
    raise ConfigError(f"refusing to replace the index at {index_dir} ({describe(old)}) with one that loses "
                      f"{' and '.join(lost)} ({describe(counts)}){why}; the old index is kept. Fix the input "
                      f"(images root, pool), or rerun with --allow-shrink to replace it anyway (more than "
                      f"{max_shrink:.0%} of a modality lost: the index_max_shrink setting)")


class IndexWriter:
    """Build an index directory from chunks of (metadata, vectors); see the module docstring.

    Use as a context manager; call :meth:`commit` at the end. Leaving the block without committing
    (an exception) removes the new data folder and keeps whatever index was at ``out_dir`` before.
    """

    def __init__(self, out_dir: str | Path, dim: int, encoder_info: dict[str, Any], index_type: str = "flat",
                 params: dict[str, Any] | None = None, allow_shrink: bool = False) -> None:
        self.out_dir = Path(out_dir).resolve()
        self.allow_shrink = allow_shrink
        self.dim = int(dim)
        self.encoder_info = encoder_info
        self.index_type = index_type
        self.params = factory.resolve_params(index_type, params)
        self.slot = BuildSlot(self.out_dir)
        self.folder = self.slot.path
        # the metadata file (unirag.index.metadata reads it): rows appended, the lookup indexes added at the
        # commit (fast after bulk insert); no journal: the whole build folder is discarded on failure
        self._meta = sqlite3.connect(self.folder / META_FILE)
        self._meta.execute("PRAGMA journal_mode=OFF")
        self._meta.execute("PRAGMA synchronous=OFF")
        self._meta.execute("CREATE TABLE meta (modality TEXT NOT NULL, row INTEGER NOT NULL, did TEXT NOT NULL, "
                           "txt TEXT, img_path TEXT, source_id TEXT, src_content TEXT, PRIMARY KEY (modality, row)) "
                           "WITHOUT ROWID")
        self._subs: dict[Modality, _SubIndex] = {}
        self._started = time.time()

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for sub in self._subs.values():  # closed already after a commit, whose published folder abort() keeps
            if sub.spill_fh is not None:
                sub.spill_fh.close()
        self._meta.close()
        self.slot.abort()

    def add(self, modality: Modality, metas: list[dict[str, Any]], vectors: np.ndarray) -> None:
        """Append one chunk of one modality. ``vectors`` must be L2-normalised float32 of shape (n, dim)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or vectors.shape[0] != len(metas):
            raise ValueError(f"expected {len(metas)} vectors of size {self.dim}, got shape {vectors.shape}")
        if len(metas) == 0:
            return
        if modality not in self._subs:
            self._subs[modality] = _SubIndex(self.folder, modality, self.dim, self.index_type, self.params)
        sub = self._subs[modality]
        self._meta.executemany(
            "INSERT INTO meta VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(modality.value, sub.count + i, str(m["did"]), m.get("txt"), m.get("img_path"), m.get("source_id"),
              m.get("src_content")) for i, m in enumerate(metas)])
        sub.add(vectors)

    def commit(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Finish the shards, hash every file, publish the new manifest. Returns the manifest."""
        if not self._subs:
            raise InputError("nothing to index: the pool has no usable candidates")
        if not self.allow_shrink:
            check_shrink(self.out_dir, {m.value: sub.count for m, sub in self._subs.items()}, extra)
        subindexes = {m.value: sub.finish() for m, sub in self._subs.items()}
        # unique: the builds read every pool through encoding.pool_candidates, which refuses a repeated did
        self._meta.execute("CREATE UNIQUE INDEX meta_did ON meta (did)")
        self._meta.execute("CREATE INDEX meta_source ON meta (source_id) WHERE source_id IS NOT NULL")
        self._meta.commit()
        self._meta.close()
        files = {}
        for path in sorted(self.folder.iterdir()):
            with path.open("rb") as f:
                os.fsync(f.fileno())
            files[path.name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "data": self.slot.name,
            "encoder": self.encoder_info,
            "dim": self.dim,
            "metric": "inner_product",
            "index_type": self.index_type,
            "params": self.params,
            "counts": {m: e["count"] for m, e in subindexes.items()},
            "total": sum(e["count"] for e in subindexes.values()),
            "subindexes": subindexes,
            "meta_file": META_FILE,
            "build_seconds": round(time.time() - self._started, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(extra or {}),
            "files": files,
        }
        self.slot.publish(manifest)
        return manifest
