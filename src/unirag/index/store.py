"""Open an index directory and search it, optionally restricted to one candidate modality.

Each modality has its own FAISS index, so a modality-restricted search only touches the vectors of
that modality (no filtering after the fact, no lost top-k slots) and ``any`` merges the per-modality
top-k lists by score. Hits are *global ids*: the concatenation of the sub-indexes in manifest order,
which index :attr:`VectorIndex.metas` directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.records import Modality
from unirag.errors import ConfigError, InputError
from unirag.index.factory import apply_search_params
from unirag.index.manifest import read_manifest, verify_checksums

ANY = "any"


def parse_modality_filter(value: str | Modality | None) -> Modality | None:
    """'text' | 'image' | 'image,text' -> Modality; 'any' / None -> None (no restriction)."""
    if value is None or isinstance(value, Modality):
        return value
    if str(value).strip().lower() == ANY:
        return None
    try:
        return Modality.parse(value)
    except ValueError:
        raise ConfigError(f"unknown modality {value!r}; expected one of: text, image, image,text, any") from None


@dataclass
class CandidateMeta:
    """What the index keeps about a candidate besides its vector."""

    did: str
    modality: Modality
    txt: str | None
    img_path: str | None
    source_id: str | None


class VectorIndex:
    """A loaded index directory. Use :meth:`open`."""

    def __init__(self, index_dir: Path, manifest: dict[str, Any], indexes: dict[Modality, Any],
                 metas: list[CandidateMeta], offsets: dict[Modality, int]) -> None:
        self.index_dir = index_dir
        self.manifest = manifest
        self.indexes = indexes
        self.metas = metas
        self.offsets = offsets
        self.dim = int(manifest["dim"])
        self.search_params: dict[Modality, dict[str, Any]] = {
            Modality.parse(m): dict(e.get("params") or {}) for m, e in manifest["subindexes"].items()}
        self._did_to_gid: dict[str, int] | None = None
        self._source_groups: dict[str, list[int]] | None = None

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, index_dir: str | Path, encoder=None, verify: bool = True) -> VectorIndex:
        """Load an index; ``encoder`` (if given) must be the one that built it."""
        import faiss

        index_dir = Path(index_dir)
        manifest = read_manifest(index_dir)
        if encoder is not None:
            check_encoder(manifest, encoder, index_dir)
        if verify:
            verify_checksums(index_dir, manifest)
        indexes: dict[Modality, Any] = {}
        metas: list[CandidateMeta] = []
        offsets: dict[Modality, int] = {}
        for key, entry in manifest["subindexes"].items():
            modality = Modality.parse(key)
            path = index_dir / entry["index_file"]
            try:
                index = faiss.read_index(str(path))
            except RuntimeError as e:
                raise InputError(f"cannot read FAISS index ({str(e).splitlines()[0]}); rebuild the index",
                                 path=path) from None
            if index.ntotal != entry["count"] or index.d != manifest["dim"]:
                raise InputError(f"index holds {index.ntotal} vectors of size {index.d}, manifest says "
                                 f"{entry['count']} of size {manifest['dim']}; rebuild the index", path=path)
            offsets[modality] = len(metas)
            metas.extend(_read_metas(index_dir / entry["meta_file"], modality, entry["count"]))
            indexes[modality] = index
        return cls(index_dir, manifest, indexes, metas, offsets)

    # -- lookups ---------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        return {m.value: int(ix.ntotal) for m, ix in self.indexes.items()}

    def __len__(self) -> int:
        return len(self.metas)

    def gid_of(self, did: str) -> int | None:
        if self._did_to_gid is None:
            self._did_to_gid = {m.did: i for i, m in enumerate(self.metas)}
        return self._did_to_gid.get(did)

    def source_group(self, source_id: str | None) -> list[int]:
        """Global ids of all candidates that share ``source_id`` (the pool's own pairing)."""
        if source_id is None:
            return []
        if self._source_groups is None:
            groups: dict[str, list[int]] = {}
            for i, m in enumerate(self.metas):
                if m.source_id is not None:
                    groups.setdefault(m.source_id, []).append(i)
            self._source_groups = groups
        return self._source_groups.get(source_id, [])

    def vectors(self, gids: list[int]) -> np.ndarray:
        """Stored vectors of the given global ids (exact for flat/HNSW/refined IVF-PQ)."""
        out = np.zeros((len(gids), self.dim), dtype=np.float32)
        for row, gid in enumerate(gids):
            modality = self.metas[gid].modality
            out[row] = self.indexes[modality].reconstruct(gid - self.offsets[modality])
        return out

    # -- search ----------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, modality: str | Modality | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, global ids) per query row; missing slots have id -1 and score -inf."""
        if k <= 0:
            raise ConfigError(f"k must be a positive integer, got {k}")
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must have shape (n, {self.dim}), got {queries.shape}")
        wanted = parse_modality_filter(modality)
        if wanted is not None:
            if wanted not in self.indexes:
                n = len(queries)
                return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64)
            return self._search_one(wanted, queries, k)
        parts = [self._search_one(m, queries, k) for m in self.indexes]
        if len(parts) == 1:
            return parts[0]
        scores = np.concatenate([p[0] for p in parts], axis=1)
        ids = np.concatenate([p[1] for p in parts], axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)

    def _search_one(self, modality: Modality, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        index = self.indexes[modality]
        apply_search_params(index, self.search_params[modality], k)
        scores, ids = index.search(queries, k)
        missing = ids < 0
        ids = ids.astype(np.int64) + self.offsets[modality]
        ids[missing] = -1
        scores = scores.astype(np.float32)
        scores[missing] = -np.inf
        return scores, ids


def check_encoder(manifest: dict[str, Any], encoder, index_dir: Path) -> None:
    built = manifest["encoder"]
    if encoder.fingerprint() != built.get("fingerprint"):
        raise ConfigError(
            f"index {index_dir} was built with encoder {built.get('name')!r} (fingerprint "
            f"{built.get('fingerprint')}), but encoder {encoder.name!r} (fingerprint {encoder.fingerprint()}) "
            "was given; use the same encoder or rebuild the index")
    if int(encoder.dim) != int(manifest["dim"]):
        raise ConfigError(f"encoder {encoder.name!r} makes {encoder.dim}-d vectors, index has {manifest['dim']}")


def _read_metas(path: Path, modality: Modality, expected: int) -> list[CandidateMeta]:
    out: list[CandidateMeta] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            try:
                m = json.loads(line)
                out.append(CandidateMeta(str(m["did"]), modality, m.get("txt"), m.get("img_path"),
                                         m.get("source_id")))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise InputError("corrupt metadata line; rebuild the index", path=path, line=lineno) from None
    if len(out) != expected:
        raise InputError(f"{len(out)} metadata lines, manifest says {expected}; rebuild the index", path=path)
    return out
