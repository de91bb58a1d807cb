"""Streaming, atomic index writer.

Vectors arrive in chunks (``add``) and go straight into a FAISS index per modality (flat, HNSW) or
are spilled to a raw float32 file in the build directory (IVF-PQ, which must be trained before
vectors can be added); metadata lines are written as they arrive. Nothing holds the whole pool
besides the index itself, so peak memory stays near the size of the vectors.

Everything is written into a temporary directory next to the target and renamed into place by
``commit``; an exception (or a kill) before that leaves the previous index untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.records import Modality
from unirag.errors import InputError
from unirag.index import factory
from unirag.index.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    file_stem,
    index_file,
    meta_file,
    sha256_file,
)

SPILL_CHUNK = 65536


class _SubIndex:
    """The part of the build for one modality: metadata file + index (or spill file for IVF-PQ)."""

    def __init__(self, tmp: Path, modality: Modality, dim: int, index_type: str, params: dict[str, Any]) -> None:
        self.modality = modality
        self.count = 0
        self.meta_fh = (tmp / meta_file(modality)).open("w", encoding="utf-8")
        self.index = None
        self.spill_path = tmp / f".spill.{file_stem(modality)}.f32"
        self.spill_fh = None
        if index_type == "flat":
            self.index = factory.new_flat(dim)
        elif index_type == "hnsw":
            self.index = factory.new_hnsw(dim, params)
        else:
            self.spill_fh = self.spill_path.open("wb")

    def add(self, metas: list[dict[str, Any]], vectors: np.ndarray) -> None:
        for m in metas:
            self.meta_fh.write(json.dumps(m, ensure_ascii=False, separators=(",", ":")))
            self.meta_fh.write("\n")
        if self.index is not None:
            self.index.add(vectors)
        else:
            self.spill_fh.write(vectors.tobytes())
        self.count += len(metas)


OWNER_FILE = ".owner-pid"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_builds(out_dir: Path) -> list[Path]:
    """Delete temp folders that killed builds of ``out_dir`` left behind (their owner process is gone).

    A build in progress in another process keeps its folder: its owner pid is still alive.
    """
    removed = []
    for pattern, pid_of in ((f".{out_dir.name}.building-*", lambda d: (d / OWNER_FILE).read_text()),
                            (f".{out_dir.name}.old-*", lambda d: d.name.rsplit(".old-", 1)[1].split("-")[0])):
        for d in out_dir.parent.glob(pattern):
            try:
                pid = int(pid_of(d))
            except (OSError, ValueError, IndexError):
                continue  # no owner recorded: leave it to the user
            if pid != os.getpid() and not _pid_alive(pid):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    return removed


class IndexWriter:
    """Build an index directory from chunks of (metadata, vectors); see the module docstring.

    Use as a context manager; call :meth:`commit` at the end. Leaving the block without committing
    (an exception) removes the temporary directory and keeps whatever was at ``out_dir`` before.
    """

    def __init__(self, out_dir: str | Path, dim: int, encoder_info: dict[str, Any], index_type: str = "flat",
                 params: dict[str, Any] | None = None, seed: int = 0) -> None:
        self.out_dir = Path(out_dir).resolve()
        self.dim = int(dim)
        self.encoder_info = encoder_info
        self.index_type = index_type
        self.params = factory.resolve_params(index_type, params)
        self.seed = seed
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_builds(self.out_dir)
        self.tmp = Path(tempfile.mkdtemp(dir=self.out_dir.parent, prefix=f".{self.out_dir.name}.building-"))
        (self.tmp / OWNER_FILE).write_text(str(os.getpid()))
        self._subs: dict[Modality, _SubIndex] = {}
        self._started = time.time()
        self._committed = False

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._committed:
            self.abort()

    def abort(self) -> None:
        for sub in self._subs.values():
            sub.meta_fh.close()
            if sub.spill_fh is not None:
                sub.spill_fh.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def add(self, modality: Modality, metas: list[dict[str, Any]], vectors: np.ndarray) -> None:
        """Append one chunk of one modality. ``vectors`` must be L2-normalised float32 of shape (n, dim)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or vectors.shape[0] != len(metas):
            raise ValueError(f"expected {len(metas)} vectors of size {self.dim}, got shape {vectors.shape}")
        if len(metas) == 0:
            return
        if modality not in self._subs:
            self._subs[modality] = _SubIndex(self.tmp, modality, self.dim, self.index_type, self.params)
        self._subs[modality].add(metas, vectors)

    def _finish_ivfpq(self, sub: _SubIndex) -> tuple[Any, str, dict[str, Any]]:
        """Train IVF-PQ on a bounded sample of the spilled vectors, then add them chunk by chunk."""
        sub.spill_fh.close()
        n = sub.count
        if n < factory.IVFPQ_MIN_COUNT:
            index = factory.new_flat(self.dim)
            kind, params = "flat", {"reason": f"ivfpq needs >= {factory.IVFPQ_MIN_COUNT} vectors, got {n}"}
        else:
            params = factory.ivfpq_shape(n, self.dim, self.params)
            index, _ = factory.new_ivfpq(self.dim, params)
            rng = np.random.default_rng(self.seed)
            n_train = min(n, int(params["train_size"]))
            rows = np.sort(rng.choice(n, size=n_train, replace=False))
            index.train(self._read_rows(sub.spill_path, rows))
            kind = "ivfpq"
        row_bytes = self.dim * 4
        with sub.spill_path.open("rb") as f:
            for start in range(0, n, SPILL_CHUNK):
                count = min(SPILL_CHUNK, n - start)
                block = np.frombuffer(f.read(count * row_bytes), dtype=np.float32).reshape(count, self.dim)
                index.add(block)
        sub.spill_path.unlink()
        return index, kind, params

    def _read_rows(self, path: Path, rows: np.ndarray) -> np.ndarray:
        """Selected rows of a spill file by plain reads (no memmap: mapped pages would count as RSS)."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        row_bytes = self.dim * 4
        with path.open("rb") as f:
            for i, r in enumerate(rows):
                f.seek(int(r) * row_bytes)
                out[i] = np.frombuffer(f.read(row_bytes), dtype=np.float32)
        return out

    def commit(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write indexes + manifest into the temp dir, then swap it into place. Returns the manifest."""
        import faiss

        if not self._subs:
            raise InputError("nothing to index: the pool has no usable candidates")
        subindexes: dict[str, Any] = {}
        for modality, sub in self._subs.items():
            sub.meta_fh.close()
            if sub.index is None:
                index, kind, params = self._finish_ivfpq(sub)
            else:
                index, kind = sub.index, self.index_type
                params = dict(self.params)
            faiss.write_index(index, str(self.tmp / index_file(modality)))
            sub.index = None
            del index
            subindexes[modality.value] = {"count": sub.count, "type": kind, "params": params,
                                          "index_file": index_file(modality), "meta_file": meta_file(modality)}
        checksums = {}
        for entry in subindexes.values():
            for name in (entry["index_file"], entry["meta_file"]):
                checksums[name] = sha256_file(self.tmp / name)
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "encoder": self.encoder_info,
            "dim": self.dim,
            "metric": "inner_product",
            "index_type": self.index_type,
            "params": self.params,
            "counts": {m: e["count"] for m, e in subindexes.items()},
            "total": sum(e["count"] for e in subindexes.values()),
            "subindexes": subindexes,
            "build_seconds": round(time.time() - self._started, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(extra or {}),
            "checksums": checksums,
        }
        with (self.tmp / MANIFEST).open("w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        self._swap_into_place()
        self._committed = True
        return manifest

    def _swap_into_place(self) -> None:
        """Rename the finished temp dir to ``out_dir``; an old index is moved aside first, then deleted."""
        old = None
        if self.out_dir.exists():
            old = self.out_dir.parent / f".{self.out_dir.name}.old-{os.getpid()}-{int(time.time())}"
            os.replace(self.out_dir, old)
        (self.tmp / OWNER_FILE).unlink(missing_ok=True)
        os.replace(self.tmp, self.out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
