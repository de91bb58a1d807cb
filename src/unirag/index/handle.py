"""``unirag.Index``: an opened index directory: build, open, look up candidates, search vectors.

The one class for an index (:class:`unirag.Retriever`, the server and the pairing code hold it too):
:meth:`Index.search` returns hits, :meth:`Index.topk` the (scores, global ids) arrays; how the
sub-indexes are searched and what a global id is: :mod:`unirag.index.store`.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unirag.data.records import Candidate, Modality
from unirag.errors import ConfigError, InputError, SkippedInputsWarning
from unirag.index.directory import index_lock
from unirag.index.manifest import read_manifest, verify_files
from unirag.index.metadata import MetaTable
from unirag.index.store import (
    RowFilter,
    SubIndex,
    check_encoder,
    check_memory_mode,
    damaged,
    fits_in_ram,
    merge_topk,
    parse_modality_filter,
)
from unirag.retrieval.results import Hit
from unirag.runs.engine import EngineOptions, with_decode_default

if TYPE_CHECKING:
    from unirag.data.pool import Pool
    from unirag.encoders.base import Encoder


class Index:
    """An index directory: per-modality FAISS files, candidate metadata and a manifest.

    Use :meth:`build` or :meth:`open`. :meth:`search` takes query vectors; to search with images
    or texts use :class:`unirag.Retriever`, which encodes them with the index's own encoder.
    """

    def __init__(self, index_dir: Path, manifest: dict[str, Any], subs: dict[Modality, SubIndex],
                 metas: MetaTable, memory: str = "mmap") -> None:
        self.path = Path(index_dir)  #: the index directory
        #: ``manifest.json``: encoder, sizes, index types, build settings, skipped images, checksums
        self.manifest = manifest
        self.subs = subs
        self.metas = metas
        self.offsets = metas.offsets  #: modality -> its first global id
        self.dim = int(manifest["dim"])  #: vector size
        self.memory = memory  #: how the FAISS files were opened: "mmap" or "ram"
        self._selections = functools.lru_cache(maxsize=32)(self._select)  # one SQL scan per filter

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, encoder: Encoder | None = None, *, verify: bool = False,
             memory: str = "mmap") -> Index:
        """Open the index in ``path``; ``encoder`` (if given) must be the one that built it.

        Reads the manifest, checks file sizes and opens the metadata: constant time with ``memory="mmap"``
        (default), which memory-maps the FAISS files, whatever the size. ``"ram"`` reads them into
        memory at open, so exact batched search runs at in-RAM FAISS speed (about 1.25x the mapped speed
        on a 1M-vector flat index); ``"auto"``: "ram" when :func:`unirag.index.store.fits_in_ram`, else
        "mmap". ``verify=True`` also re-hashes every file against its recorded SHA-256 (reads it all; as
        ``unirag index verify``).
        """
        check_memory_mode(memory)
        index_dir = Path(path)
        with index_lock(index_dir, shared=True):
            manifest = read_manifest(index_dir)
            if memory == "auto":
                memory = "ram" if fits_in_ram(index_dir) else "mmap"
            if encoder is not None:
                check_encoder(manifest, encoder, index_dir)
            verify_files(index_dir, manifest, hashes=verify)
            folder = index_dir / manifest["data"]
            subs = {Modality.parse(m): SubIndex(folder, entry, int(manifest["dim"]), memory)
                    for m, entry in manifest["subindexes"].items()}
            metas = MetaTable(folder / manifest["meta_file"], {m: s.count for m, s in subs.items()})
        return cls(index_dir, manifest, subs, metas, memory)

    @classmethod
    def build(cls, pool: Pool | str | Path | Iterable[Candidate], out: str | Path, *,
              encoder: Encoder | str | None = None, images_root: str | Path | None = None,
              index_type: str = "flat", params: Mapping[str, Any] | None = None, batch_size: int = 64,
              device: str | None = "auto", dtype: str | None = "auto", progress: bool | None = None, engine: str = "local",
              allow_shrink: bool = False, autocast: str | None = None, **engine_options: Any) -> Index:
        """Encode every candidate of ``pool`` and write the index to ``out`` (atomically); return it opened.

        ``pool``: a :class:`unirag.Pool` (its images root is used unless ``images_root`` is given),
        a pool JSONL path, or candidates. ``encoder``: an encoder object, a spec (hub id, local
        directory, "offline") or None for the offline default, loaded on ``device`` in ``dtype``
        (``autocast="float16"``: forward passes under float16 autocast on CUDA, as UniIR embeds; see
        :func:`unirag.encoders.registry.precision_options`; Ray workers load theirs the same way).
        ``index_type``: "flat" (exact), "hnsw" or "ivfpq"; ``params`` override their settings.
        ``engine``: "local" (this process) or "ray" (shards embedded on Ray Data, resumable), with
        ``engine_options`` ``shards_dir``, ``shard_size``, ``workers``, ``gpus_per_worker``,
        ``ray_address`` (see :mod:`unirag.index.ray_engine`), and ``decode_workers``: processes
        decoding and preprocessing images ahead of the encoder (None = the encoder's setting, by
        default auto; 0 = inline; see :mod:`unirag.data.loader`); the vectors do not depend on it.
        Rebuilding over an index that this build would shrink by more than the ``index_max_shrink``
        setting's share of a modality (10%), or lose a modality of, is refused (``ConfigError``; the old
        index is kept) unless ``allow_shrink=True``.
        ``progress``: a progress bar (None: when stderr is a terminal, as a CLI command shows one).

        Inputs that cannot be indexed (a missing file, a truncated JPEG, a decompression bomb) are
        skipped, not fatal: a :class:`unirag.errors.SkippedInputsWarning` gives their count and first
        paths, and :attr:`skipped` lists them with their reasons.
        """
        from unirag.index import encoding, ray_engine
        from unirag.index.factory import resolve_params

        resolve_params(index_type, params)  # a bad option fails before any model loads
        if batch_size <= 0:
            raise ConfigError(f"batch_size must be positive, got {batch_size}")
        options = {k: v for k, v in engine_options.items() if v is not None}
        shards = {k: options.pop(k) for k in ("shards_dir", "shard_size") if k in options}
        run_on = EngineOptions(engine=engine, **options)  # the engine, Ray and decode options checked here
        if "shard_size" in shards and (engine != "ray" or shards["shard_size"] <= 0):
            raise ConfigError(f"--shard-size goes with --engine ray and must be positive, got {shards['shard_size']}")
        source, root = _pool_source(pool, images_root, in_memory=engine == "local")
        enc, info, run_on = _encoder(encoder, device, dtype, autocast, run_on)
        root = Path(root).absolute() if root is not None else None
        progress = sys.stderr.isatty() if progress is None else progress
        if engine == "ray":  # workers load their own copy: same dtype and autocast, same fingerprint
            ray_engine.build_with_ray(source, root, out, enc, info, index_type, batch_size, params, progress,
                                      allow_shrink, run_on, dtype, **shards)
        else:
            encoding.build_local(source, root, out, enc, info, index_type, batch_size, params, progress,
                                 allow_shrink)
        return cls.open(out, enc)._warn_skipped()

    @classmethod
    def from_embeddings(cls, pool: Pool | str | Path, embeddings: str | Path, out: str | Path, *,
                        encoder: Encoder | str | None = None, ids: str | Path | None = None,
                        images_root: str | Path | None = None, index_type: str = "flat",
                        params: Mapping[str, Any] | None = None, progress: bool = True,
                        allow_shrink: bool = False) -> Index:
        """Write an index of ``pool`` from precomputed vectors (no candidate is encoded); return it opened.

        ``embeddings``: a ``.npy`` matrix (row order = ``ids`` file, else the pool's order), a Parquet
        file (id + embedding columns) or a folder of shards from :meth:`embed_shard`. ``encoder``: the
        model that made them (object or spec), recorded so queries use the same one; a shards folder
        records its own, and a different ``encoder`` is refused. With neither, the index records no
        encoder (``index.encoder_spec`` is None) and queries must be given as vectors.
        ``allow_shrink``: as in :meth:`build`.
        """
        from unirag.index.embeddings import build_from_embeddings

        pool_path, root = _pool_source(pool, images_root)
        info = _encoder(encoder, "cpu", "float32")[1] if encoder is not None else None
        build_from_embeddings(pool_path, embeddings, out, info, ids=ids, index_type=index_type,
                              params=dict(params or {}), images_root=root, progress=progress,
                              allow_shrink=allow_shrink)
        return cls.open(out)._warn_skipped()

    @staticmethod
    def embed_shard(pool: Pool | str | Path, shard: str | tuple[int, int], shards_dir: str | Path, *,
                    encoder: Encoder | str | None = None, images_root: str | Path | None = None,
                    batch_size: int = 64, device: str | None = "auto", dtype: str | None = "auto",
                    decode_workers: int | str | None = None, autocast: str | None = None) -> dict[str, Any]:
        """Embed shard ``i`` of ``n`` of ``pool`` into ``shards_dir`` in this process (no Ray), so that
        many machines can each embed a part; then :meth:`from_embeddings` with ``shards_dir`` builds the
        index. ``shard``: ``"i/n"`` (0-based) or ``(i, n)``. A shard already done is skipped. Returns the
        shard's record (``rows``, ``seconds``, ``skipped``). ``autocast``: as in :meth:`build`."""
        from unirag.index.shards import embed_shard, load_or_create_plan

        try:
            i, n = (int(x) for x in (shard.split("/") if isinstance(shard, str) else shard))
        except (TypeError, ValueError):
            raise ConfigError(f"--shard expects i/n with integers, e.g. 0/8, got {shard!r}") from None
        if n <= 0 or not 0 <= i < n:
            raise ConfigError(f"--shard {shard}: need 0 <= i < n")
        if batch_size <= 0:
            raise ConfigError(f"batch_size must be positive, got {batch_size}")
        pool_path, root = _pool_source(pool, images_root)
        enc, info, _ = _encoder(encoder, device, dtype, autocast, EngineOptions(decode_workers=decode_workers))
        plan = load_or_create_plan(shards_dir, pool_path, info, n_shards=n)
        return embed_shard(shards_dir, plan, i, enc, root, batch_size)

    # -- what it holds -----------------------------------------------------------------------
    @property
    def skipped(self) -> list[tuple[str, str]]:
        """``(path, reason)`` of the inputs the build skipped (missing or unreadable images), the first
        ones as the manifest keeps them; :attr:`skipped_count` is how many there were in all."""
        return [(item["path"], item["reason"]) for item in (self.manifest.get("bad_images") or {}).get("first", [])]

    @property
    def skipped_count(self) -> int:
        """How many inputs the build skipped (see :attr:`skipped`)."""
        return int((self.manifest.get("bad_images") or {}).get("count", 0))

    def _warn_skipped(self) -> Index:
        """The one report of skipped inputs, from Python as from the CLI (which prints warnings)."""
        if self.skipped_count:
            first = ", ".join(f"{p} ({r})" for p, r in self.skipped[:3])
            more = f" and {self.skipped_count - 3} more" if self.skipped_count > 3 else ""
            warnings.warn(f"{self.skipped_count} input(s) missing or unreadable, skipped: {first}{more} (all: "
                          "index.skipped, manifest.json)", SkippedInputsWarning, stacklevel=3)
        return self

    @property
    def counts(self) -> dict[str, int]:
        """Vectors per candidate modality, e.g. ``{"text": 255, "image": 51}``."""
        return {m.value: sub.count for m, sub in self.subs.items()}

    def __len__(self) -> int:
        return len(self.metas)

    @property
    def encoder_spec(self) -> str | None:
        """What :func:`unirag.load_encoder` takes to load the encoder that built this index."""
        return self.manifest["encoder"].get("spec")

    @property
    def images_root(self) -> Path | None:
        """The folder the pool's image paths are relative to (recorded at build time)."""
        root = self.manifest.get("images_root")
        return Path(root) if root else None

    @property
    def pool(self) -> Pool:
        """The candidates this index holds, as a :class:`unirag.Pool` (from the index itself, no file read)."""
        from unirag.data.pool import Pool

        return Pool(list(self.metas), images_root=self.images_root)

    def candidate(self, did: str) -> Candidate:
        """The candidate with this did (KeyError if the index has none)."""
        gid = self.gid_of(did)
        if gid is None:
            raise KeyError(f"no candidate {did!r} in index {self.path}")
        return self.metas[gid]

    def load_encoder(self, *, device: str | None = "auto", dtype: str | None = "auto") -> Encoder:
        """Load the encoder recorded in the manifest and check that it is the one that built the index."""
        from unirag.encoders.registry import load_encoder

        encoder = load_encoder(self.encoder_spec, device=device, dtype=dtype)
        check_encoder(self.manifest, encoder, self.path)
        return encoder

    # -- search ------------------------------------------------------------------------------
    def search(self, vectors, k: int = 10, modality: str | None = None, where=None) -> list[list[Hit]]:
        """Top-``k`` hits per query vector (one row per query; a single vector is one query).

        ``modality``: None or "any" searches every candidate; "text", "image" or "image,text"
        only those. ``where``: a metadata filter such as ``{"dataset": "mscoco", "split": ["val",
        "test"]}`` (see :class:`unirag.Selection`), applied inside the search: the hits are the exact
        top-k of the matching candidates. Scores are inner products of L2-normalised vectors (cosine
        similarity).
        """
        scores, ids = self.topk(np.atleast_2d(np.asarray(vectors, dtype=np.float32)), k, modality, where)
        metas = self.metas
        return [[Hit(metas[g].did, float(s), metas[g].modality.value)
                 for s, g in zip(row_s.tolist(), row_g.tolist(), strict=True) if g >= 0]
                for row_s, row_g in zip(scores, ids, strict=True)]

    def gid_of(self, did: str) -> int | None:
        """The global id of candidate ``did`` (None if the index has none)."""
        found = self.metas.gids("did", did)
        return found[0] if found else None

    def source_group(self, source_id: str | None) -> list[int]:
        """Global ids of all candidates that share ``source_id`` (the pool's own pairing)."""
        return self.metas.gids("source_id", source_id) if source_id is not None else []

    def vectors(self, gids: list[int]) -> np.ndarray:
        """Stored vectors of the given global ids (exact, except for IVF-PQ built with ``refine=false``)."""
        out = np.zeros((len(gids), self.dim), dtype=np.float32)
        for row, gid in enumerate(gids):
            modality, local = self.metas.locate(int(gid))
            out[row] = self.subs[modality].reconstruct(local)
        return out

    def topk(self, queries: np.ndarray, k: int, modality: str | Modality | None = None,
             where: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, global ids) per query row; missing slots have id -1 and score -inf.

        ``where``: a metadata filter (``{"dataset": "mscoco"}``, ``{"modality": "image", "split":
        ["val", "test"]}``; see :func:`unirag.retrieval.selection.normalise_where`): only matching
        candidates are searched, inside FAISS (ID selectors), so the top-k is exact among them.
        """
        if k <= 0:
            raise ConfigError(f"k must be a positive integer, got {k}")
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must have shape (n, {self.dim}), got {queries.shape}")
        parts = []  # local rows of each sub-index -> global ids
        for m, rows in self.row_filters(modality, where).items():
            scores, ids = self.subs[m].search(queries, k, rows)
            parts.append((scores, np.where(ids >= 0, ids + self.offsets[m], -1)))
        scores, ids = merge_topk(parts, k, len(queries))
        served = ids >= 0
        if not np.isfinite(scores[served]).all():  # cheap: k numbers per query (see the module docstring)
            row, col = (int(x[0]) for x in np.nonzero(served & ~np.isfinite(scores)))
            raise damaged(self.path, f"candidate {self.metas[int(ids[row, col])].did!r} scored "
                                          f"{scores[row, col]}, not a finite number")
        return scores, ids

    def row_filters(self, modality: str | Modality | None, where: Any) -> dict[Modality, RowFilter | None]:
        """Modality -> its selected rows (None: all of them) for a modality and a filter; modalities with no
        match are left out. Computed once per filter (one SQL scan) and kept."""
        from unirag.retrieval.selection import normalise_where

        wanted = parse_modality_filter(modality)
        return {m: f for m, f in self._selections(normalise_where(where)).items() if wanted is None or m is wanted}

    def _select(self, key: tuple) -> dict[Modality, RowFilter | None]:
        conditions = dict(key)
        modalities = {Modality.parse(v) for v in conditions.pop("modality", [m.value for m in self.subs])}
        rows = self.metas.rows_where(sorted(conditions.items())) if conditions else None
        out = {}
        for m in (m for m in self.subs if m in modalities):
            selected = np.asarray(rows.get(m, []) if rows is not None else [], dtype=np.int64)
            if rows is None or len(selected) == self.subs[m].count:
                out[m] = None
            elif len(selected):
                out[m] = RowFilter(selected, self.subs[m].shards)
        return out

    def scope(self, modality: str | Modality | None = None, where: Any = None) -> int:
        """How many candidates a search with this modality and filter looks at."""
        return sum(self.subs[m].count if f is None else sum(f.counts)
                   for m, f in self.row_filters(modality, where).items())

    # -- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """``{"path": ...}``: what :meth:`from_dict` reopens."""
        out = {"path": str(self.path)}
        if self.memory != "mmap":
            out["memory"] = self.memory
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Index:
        """Reopen the index :meth:`to_dict` describes."""
        return cls.open(data["path"], verify=bool(data.get("verify", False)), memory=data.get("memory", "mmap"))

    def __repr__(self) -> str:
        return f"Index({str(self.path)!r}, {self.counts}, encoder={self.manifest['encoder'].get('name')!r})"


def _encoder(encoder, device: str | None, dtype: str | None, autocast: str | None = None,
             engine: EngineOptions | None = None):
    """(encoder object, what the manifest records about it, options) for an encoder object, a spec string
    or None (offline); the record's ``spec`` is what the user typed, to reload it. The encoder decodes with
    ``engine``'s decode workers where they are set, else with its own setting, which the returned
    ``engine`` options then carry (Ray workers are sized by them); ``autocast`` goes to the loading."""
    from unirag.encoders.registry import load_encoder

    if encoder is None or isinstance(encoder, str):
        enc, spec = load_encoder(encoder, device=device, dtype=dtype, autocast=autocast), encoder
    else:
        enc, spec = encoder, getattr(encoder, "spec", None)
    engine = with_decode_default(engine or EngineOptions(), getattr(enc, "decode_workers", None))
    enc.decode_workers = engine.decode_workers
    return enc, {"name": enc.name, "spec": spec, "dim": int(enc.dim), "config": enc.config(),
                 "fingerprint": enc.fingerprint()}, engine


def _pool_source(pool, images_root, in_memory: bool = False) -> tuple[Path | list[Candidate], Any]:
    """(pool JSONL path, images root) for a :class:`unirag.Pool`, a path or (``in_memory``: then kept
    as a list) candidates; a Pool's own images root unless ``images_root`` is given."""
    from unirag.data.pool import Pool

    if isinstance(pool, Pool):
        images_root = images_root if images_root is not None else pool.images_root
        pool = pool.path if pool.path is not None else list(pool)
    source = Path(pool) if isinstance(pool, str | Path) else list(pool)
    if isinstance(source, Path) and not source.is_file():
        raise InputError("candidate pool not found", path=source)
    if isinstance(source, list) and not in_memory:
        raise ConfigError("in-memory candidates are indexed by Index.build with engine='local' only; write them "
                          "to a JSONL pool file (Pool.read) for this")
    return source, images_root
