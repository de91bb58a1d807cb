"""Search an index directory: one sub-index per candidate modality, each in one or more FAISS shards.

A modality-restricted search touches only that modality's vectors (no filtering after the fact, no
lost top-k slots); ``any`` and multi-shard sub-indexes merge their lists into the exact top-k
(:func:`merge_topk`). Hits are *global ids*: the sub-indexes concatenated in manifest order, which
index :attr:`unirag.Index.metas`.

Opening is cheap at any size: FAISS files are memory-mapped, metadata is SQLite queried on demand
(:mod:`unirag.index.metadata`), IVF-PQ raw vectors are read row by row (:class:`RawVectors`), and
only file sizes are checked. A file damaged in place (same size) can hold a non-finite number that
FAISS would serve as a score: at open :data:`OPEN_SAMPLE_ROWS` rows spread over each shard (and the
IVF-PQ centroids and code book every score goes through) are checked finite, about 1 ms on a
200,000 x 512 flat index against reading all 400 MB, and every search checks the k scores it
returns. Both errors point to ``unirag index verify``: a damaged but *finite* number changes
rankings silently, and only re-hashing finds it.

``memory="ram"`` reads the FAISS files at open (:func:`fits_in_ram`): exact search over a mapped flat
index runs at ~0.8x the in-RAM speed, so batch jobs and servers use ``ram``; ``mmap`` opens instantly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from unirag.data.records import Modality
from unirag.errors import ConfigError, InputError
from unirag.index.factory import search_parameters
from unirag.index.manifest import read_manifest

#: Queries re-scored together from the raw vectors (bounds the gathered block).
RESCORE_BATCH = 256
#: Rows of each shard checked finite at open (all of them in a shard this small); see the module docstring.
OPEN_SAMPLE_ROWS = 256
#: How FAISS files are opened: memory-mapped (instant, pages read on demand), read into RAM, or
#: ``auto``: read into RAM when :func:`fits_in_ram`.
MEMORY_MODES = ("mmap", "ram", "auto")


def check_memory_mode(memory: str) -> None:
    if memory not in MEMORY_MODES:
        raise ConfigError(f"unknown index memory mode {memory!r}; expected one of: {', '.join(MEMORY_MODES)}")


def available_memory() -> int | None:
    """Bytes of memory available to new allocations (``MemAvailable``), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def fits_in_ram(index_dir: str | Path, fraction: float = 0.5) -> bool:
    """Whether the index's FAISS files take at most ``fraction`` of the memory available now."""
    manifest = read_manifest(index_dir)  # its sizes are the files' (checked at every open)
    size = sum(manifest["files"][shard["file"]]["size"] for entry in manifest["subindexes"].values()
               for shard in entry["shards"])
    avail = available_memory()
    return avail is not None and size <= fraction * avail


def parse_modality_filter(value: str | Modality | None) -> Modality | None:
    """'text' | 'image' | 'image,text' -> Modality; 'any' / None -> None (no restriction)."""
    if value is None or isinstance(value, Modality):
        return value
    if str(value).strip().lower() == "any":
        return None
    try:
        return Modality.parse(value)
    except ValueError:
        raise ConfigError(f"unknown modality {value!r}; expected one of: text, image, image,text, any") from None


def merge_topk(parts: list[tuple[np.ndarray, np.ndarray]], k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of several (scores, ids) lists for ``n`` query rows; ties keep the earlier list first,
    and slots no list fills are missing (score -inf, id -1)."""
    if len(parts) == 1 and parts[0][0].shape[1] >= k:  # one full list (one shard, one modality): no sort
        return parts[0][0][:, :k], parts[0][1][:, :k]
    parts = [*parts, (np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64))]
    scores = np.concatenate([p[0] for p in parts], axis=1)
    ids = np.concatenate([p[1] for p in parts], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


class RawVectors:
    """Rows of a raw float32 vector file, read (and, with ``create``, written) with positioned I/O.

    Not a memory map on purpose: every page a map touches counts as the process's resident memory,
    and the kernel maps already-cached neighbour pages on each fault (fault-around), so re-scoring
    random rows of a 10 GB file from a map showed ~10 GB RSS after 1,000 queries, against 0.3 GB
    with ``pread`` at the same speed. The file stays open, so it stays readable after a rebuild
    deletes it. ``create``: a new zero-filled file of ``count`` rows, written with :meth:`write`.
    """

    def __init__(self, path: Path, count: int, dim: int, create: bool = False) -> None:
        self.path, self.count, self.dim = path, count, dim
        self.row_bytes = dim * 4
        if create:
            with path.open("wb") as f:
                f.truncate(count * self.row_bytes)
        self.fd: int | None = os.open(path, os.O_RDWR if create else os.O_RDONLY)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        buf = memoryview(out).cast("B")
        for i, r in enumerate(rows.tolist()):  # in range: rows come from MetaTable.locate or FAISS
            start = i * self.row_bytes
            if os.preadv(self.fd, [buf[start : start + self.row_bytes]], r * self.row_bytes) != self.row_bytes:
                raise InputError(f"short read at row {r}: the file is truncated; rebuild the index", path=self.path)
        return out

    def block(self, first: int, last: int) -> np.ndarray:
        """Rows ``first .. last - 1`` in one read."""
        data = os.pread(self.fd, (last - first) * self.row_bytes, first * self.row_bytes)
        return np.frombuffer(data, dtype=np.float32).reshape(-1, self.dim)

    def write(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for r, row in zip(rows.tolist(), vectors, strict=True):
            os.pwrite(self.fd, row.tobytes(), r * self.row_bytes)

    def close(self, delete: bool = False) -> None:
        """Close the file (idempotent); ``delete``: and remove it."""
        if getattr(self, "fd", None) is not None:
            os.close(self.fd)
            self.fd = None
            if delete:
                self.path.unlink(missing_ok=True)

    __del__ = close


class RowFilter:
    """The selected local rows of one sub-index, as one FAISS ID selector per shard.

    A bitmap selector (one bit per vector of the shard) costs one bit test per scanned vector,
    whatever the selectivity; FAISS skips the distance of every unselected vector.
    """

    def __init__(self, rows: np.ndarray, shards: list[tuple[Any, int]]) -> None:
        self.counts: list[int] = []  # rows selected, per shard
        self.selectors: list[Any] = []
        self._bitmaps: list[np.ndarray] = []
        for index, first in shards:
            n = int(index.ntotal)
            lo, hi = np.searchsorted(rows, [first, first + n])
            mask = np.zeros(n, dtype=bool)
            mask[rows[lo:hi] - first] = True
            bitmap = np.packbits(mask, bitorder="little")  # the selector reads this buffer: kept alive with it
            self.counts.append(int(hi - lo))
            self.selectors.append(faiss.IDSelectorBitmap(n, faiss.swig_ptr(bitmap)) if hi > lo else None)
            self._bitmaps.append(bitmap)


class SubIndex:
    """One modality: FAISS shards (rows ``start .. start+count`` each) and optional raw vectors."""

    def __init__(self, folder: Path, entry: dict[str, Any], dim: int, memory: str = "mmap") -> None:
        self.count = int(entry["count"])
        self.params: dict[str, Any] = dict(entry.get("params") or {})
        self.shards: list[tuple[Any, int]] = []  # (faiss index, first row)
        start = 0
        for shard in entry["shards"]:
            path = folder / shard["file"]
            try:
                flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if memory == "mmap" else 0
                index = faiss.read_index(str(path), flags)
            except RuntimeError as e:
                raise InputError(f"cannot read FAISS index ({str(e).splitlines()[0]}); rebuild the index",
                                 path=path) from None
            if index.ntotal != shard["count"] or index.d != dim:
                raise InputError(f"index holds {index.ntotal} vectors of size {index.d}, manifest says "
                                 f"{shard['count']} of size {dim}; rebuild the index", path=path)
            if isinstance(index, faiss.IndexIVF) and index.ntotal:
                # every query scans all coarse centroids: read them now (one probe of a zero query),
                # so that the first query does not pay their page faults; lists are read on demand
                index.nprobe = 1
                index.search(np.zeros((1, dim), dtype=np.float32), 1)
            _check_sample(index, path)
            self.shards.append((index, start))
            start += int(index.ntotal)
        if start != self.count:
            raise InputError(f"shards hold {start} vectors, manifest says {self.count}; rebuild the index",
                             path=folder)
        self.vectors: RawVectors | None = None
        if entry.get("vectors_file"):
            self.vectors = RawVectors(folder / entry["vectors_file"], self.count, dim)
            _refuse_non_finite(self.vectors.rows(sample_rows(self.count)), self.vectors.path)
            # load the lazily imported numpy code the re-scoring uses now, not in the first query
            self._rescore(np.zeros((1, dim), dtype=np.float32), np.zeros((1, 1), dtype=np.int64), 1)

    def search(self, queries: np.ndarray, k: int, rows: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, local rows); with raw vectors, a ``refine_k_factor`` x k shortlist re-scored exactly.

        ``rows``: search only these local rows (a FAISS ID selector inside each shard's search, so
        the top-k is that of the selected rows, not a filtered top-k of all rows)."""
        refine = float(self.params.get("refine_k_factor", 8))
        fetch = k if self.vectors is None else max(k, int(round(k * refine)))  # the shortlist to re-score
        parts = []
        for s, (index, first) in enumerate(self.shards):
            take = min(fetch, int(index.ntotal) if rows is None else rows.counts[s])
            if take == 0:
                continue
            selector = rows.selectors[s] if rows is not None else None
            scores, ids = index.search(queries, take, params=search_parameters(index, self.params, take, selector))
            missing = ids < 0
            parts.append((np.where(missing, -np.inf, scores).astype(np.float32),
                          np.where(missing, -1, ids + first)))
        scores, ids = merge_topk(parts, fetch, len(queries))
        if self.vectors is not None and parts:
            scores, ids = self._rescore(queries, ids, k)
        return scores[:, :k], ids[:, :k]

    def _rescore(self, queries: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        out_s = np.full((len(queries), ids.shape[1]), -np.inf, dtype=np.float32)
        for s in range(0, len(queries), RESCORE_BATCH):
            block = ids[s : s + RESCORE_BATCH]
            valid = block >= 0
            rows = np.where(valid, block, 0)
            uniq = np.unique(rows)  # sorted: reads the rows in file order
            vecs = self.vectors.rows(uniq)
            exact = np.einsum("qcd,qd->qc", vecs[np.searchsorted(uniq, rows)], queries[s : s + RESCORE_BATCH])
            if not np.isfinite(exact[valid]).all():
                _refuse_non_finite(vecs, self.vectors.path)
            out_s[s : s + RESCORE_BATCH] = np.where(valid, exact, -np.inf)
        order = np.argsort(-out_s, axis=1, kind="stable")[:, :k]
        ids = np.take_along_axis(ids, order, axis=1)
        scores = np.take_along_axis(out_s, order, axis=1)
        ids[~np.isfinite(scores)] = -1
        return scores, ids

    def reconstruct(self, row: int) -> np.ndarray:
        """The stored vector of local ``row``: exact from raw vectors/flat/HNSW, decoded for plain IVF-PQ."""
        if self.vectors is not None:
            return self.vectors.rows(np.array([row]))[0]
        for index, first in reversed(self.shards):  # the first shard starts at row 0
            if row >= first:
                return index.reconstruct(int(row - first))


def sample_rows(count: int, n: int = OPEN_SAMPLE_ROWS) -> np.ndarray:
    """Up to ``n`` row numbers spread evenly over ``count`` rows, first and last included."""
    if count <= n:
        return np.arange(count, dtype=np.int64)
    return np.unique(np.linspace(0, count - 1, n).round().astype(np.int64))


def damaged(where: Any, detail: str) -> InputError:
    """The error for a damaged index file: it points to ``unirag index verify``."""
    return InputError(f"{detail}: the index files are damaged; run 'unirag index verify' on the index "
                      "directory to find the file, then rebuild the index", path=where)


def _refuse_non_finite(vectors: np.ndarray, where: Any) -> None:
    bad = ~np.isfinite(vectors)
    if bad.any():
        row, col = (int(x[0]) for x in np.nonzero(bad))
        raise damaged(where, f"non-finite number ({vectors[row, col]}) in a stored vector")


def _check_sample(index: Any, path: Path) -> None:
    """Refuse a shard whose sampled rows (or, for IVF, coarse centroids and PQ code book) are not finite."""
    n = int(index.ntotal)
    if isinstance(index, faiss.IndexIVF):
        parts = [index.quantizer.reconstruct_n(0, int(index.quantizer.ntotal))] if index.quantizer.ntotal else []
        pq = getattr(index, "pq", None)
        if pq is not None:
            parts.append(faiss.vector_to_array(pq.centroids).reshape(1, -1))
        for part in parts:
            _refuse_non_finite(part, path)
        if not getattr(index, "direct_map", None) or index.direct_map.type == faiss.DirectMap.NoMap:
            return  # codes are bytes into the code book checked above: the stored rows are finite with it
    if n:
        _refuse_non_finite(index.reconstruct_batch(sample_rows(n)), path)


def check_encoder(manifest: dict[str, Any], encoder, index_dir: Path) -> None:
    built = manifest["encoder"]
    if encoder.fingerprint() != built.get("fingerprint"):
        raise ConfigError(
            f"index {index_dir} was built with encoder {built.get('name')!r} (fingerprint "
            f"{built.get('fingerprint')}), but encoder {encoder.name!r} (fingerprint {encoder.fingerprint()}) "
            "was given; use the same encoder or rebuild the index")
    if int(encoder.dim) != int(manifest["dim"]):
        raise ConfigError(f"encoder {encoder.name!r} makes {encoder.dim}-d vectors, index has {manifest['dim']}")
