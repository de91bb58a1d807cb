"""``unirag.Index``: a built index as users hold it (build, open, search raw vectors).

A thin facade over the index internals (:mod:`unirag.index.build`, :mod:`unirag.index.store`):
it adds what a caller needs without reading manifests by hand: the encoder that built it, the pool
it holds (every candidate's text, image path and pairing), and the absolute images root.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unirag.data.records import Candidate
from unirag.retrieval.results import Hit

if TYPE_CHECKING:
    from unirag.data.pool import Pool
    from unirag.encoders.base import Encoder
    from unirag.index.store import VectorIndex


class Index:
    """An index directory: per-modality FAISS files, candidate metadata and a manifest.

    Use :meth:`build` or :meth:`open`. :meth:`search` takes query vectors; to search with images
    or texts use :class:`unirag.Retriever`, which encodes them with the index's own encoder.
    """

    def __init__(self, store: VectorIndex) -> None:
        self.store = store  #: the underlying :class:`~unirag.index.store.VectorIndex`

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, verify: bool = False, memory: str = "mmap") -> Index:
        """Open the index in ``path`` (file sizes are checked). ``verify=True`` also re-hashes every
        file against its recorded SHA-256 (reads the whole index).

        ``memory="mmap"`` (default) memory-maps the FAISS files: instant at any size. ``"ram"`` reads
        them into memory at open, so exact batched search runs at in-RAM FAISS speed (about 1.25x
        the mapped speed on a 1M-vector flat index); see :func:`unirag.index.store.fits_in_ram`.
        """
        from unirag.index.store import VectorIndex

        return cls(VectorIndex.open(path, None, verify, memory))

    @classmethod
    def build(cls, pool: Pool | str | Path | Iterable[Candidate], out: str | Path, *,
              encoder: Encoder | str | None = None, images_root: str | Path | None = None,
              index_type: str = "flat", params: Mapping[str, Any] | None = None, batch_size: int = 64,
              device: str | None = "auto", dtype: str | None = "auto", progress: bool | None = None, engine: str = "local",
              decode_workers: int | str | None = None, allow_shrink: bool = False, autocast: str | None = None,
              **engine_options: Any) -> Index:
        """Encode every candidate of ``pool`` and write the index to ``out`` (atomically); return it opened.

        ``pool``: a :class:`unirag.Pool` (its images root is used unless ``images_root`` is given),
        a pool JSONL path, or candidates. ``encoder``: an encoder object, a spec (hub id, local
        directory, "offline") or None for the offline default, loaded on ``device`` in ``dtype``
        (``autocast="float16"``: forward passes under float16 autocast on CUDA, as UniIR embeds; see
        :func:`unirag.encoders.registry.precision_options`; Ray workers load theirs the same way).
        ``index_type``: "flat" (exact), "hnsw" or "ivfpq"; ``params`` override their settings.
        ``engine``: "local" (this process) or "ray" (shards embedded on Ray Data, resumable), with
        ``engine_options`` ``shards_dir``, ``shard_size``, ``workers``, ``gpus_per_worker``,
        ``ray_address`` (see :func:`unirag.index.build.build_index`). ``decode_workers``: processes
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
        import sys

        from unirag.data.pool import Pool
        from unirag.errors import ConfigError
        from unirag.index.build import build_index
        from unirag.index.factory import resolve_params

        params = dict(params or {})
        resolve_params(index_type, params)  # a bad option fails before any model loads
        if batch_size <= 0:
            raise ConfigError(f"batch_size must be positive, got {batch_size}")
        source: str | Path | Iterable[Candidate]
        if isinstance(pool, Pool):
            root = images_root if images_root is not None else pool.images_root
            source = pool.path if pool.path is not None else list(pool)
        else:
            root, source = images_root, pool
        spec, enc = _encoder_and_spec(encoder, device, dtype, autocast, decode_workers)
        options = {k: v for k, v in engine_options.items() if v is not None}
        if engine == "ray":
            options.setdefault("worker_dtype", dtype)  # workers load their own copy: same dtype, same fingerprint
            options.setdefault("worker_autocast", getattr(enc, "autocast_dtype", None))
        build_index(source, Path(root).absolute() if root is not None else None, out, enc, encoder_spec=spec,
                    index_type=index_type, batch_size=batch_size, params=params, engine=engine,
                    progress=sys.stderr.isatty() if progress is None else progress, allow_shrink=allow_shrink,
                    **options)
        from unirag.index.store import VectorIndex

        return cls(VectorIndex.open(out, enc))._warn_skipped()

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
        from unirag.errors import ConfigError
        from unirag.index.build import encoder_info
        from unirag.index.embeddings import build_from_embeddings
        from unirag.index.shards import PLAN, read_plan
        from unirag.index.store import VectorIndex

        pool_path, root = _pool_source(pool, images_root)
        info = None
        if encoder is not None:
            spec, enc = _encoder_and_spec(encoder, "cpu", "float32")
            info = encoder_info(enc, spec)
        embeddings = Path(embeddings)
        if embeddings.is_dir() and (embeddings / PLAN).exists():
            planned = read_plan(embeddings).encoder
            if info is not None and info["fingerprint"] != planned.get("fingerprint"):
                raise ConfigError(f"encoder {info.get('spec') or info.get('name')!r} is not the encoder these shards "
                                  f"were made with ({planned.get('name')!r}, spec {planned.get('spec')!r})")
            info = info or planned
        build_from_embeddings(pool_path, embeddings, out, info, ids=ids, index_type=index_type,
                              params=dict(params or {}), images_root=root, progress=progress,
                              allow_shrink=allow_shrink)
        return cls(VectorIndex.open(out, None))._warn_skipped()

    @staticmethod
    def embed_shard(pool: Pool | str | Path, shard: str | tuple[int, int], shards_dir: str | Path, *,
                    encoder: Encoder | str | None = None, images_root: str | Path | None = None,
                    batch_size: int = 64, device: str | None = "auto", dtype: str | None = "auto",
                    decode_workers: int | str | None = None, autocast: str | None = None) -> dict[str, Any]:
        """Embed shard ``i`` of ``n`` of ``pool`` into ``shards_dir`` in this process (no Ray), so that
        many machines can each embed a part; then :meth:`from_embeddings` with ``shards_dir`` builds the
        index. ``shard``: ``"i/n"`` (0-based) or ``(i, n)``. A shard already done is skipped. Returns the
        shard's record (``rows``, ``seconds``, ``skipped``). ``autocast``: as in :meth:`build`."""
        from unirag.index.build import embed_pool_shard
        from unirag.index.shards import parse_shard_spec

        i, n = parse_shard_spec(shard if isinstance(shard, str) else "/".join(map(str, shard)))
        pool_path, root = _pool_source(pool, images_root)
        spec, enc = _encoder_and_spec(encoder, device, dtype, autocast, decode_workers)
        return embed_pool_shard(pool_path, shards_dir, i, n, enc, spec, root, batch_size)

    # -- what it holds -----------------------------------------------------------------------
    @property
    def path(self) -> Path:
        """The index directory."""
        return Path(self.store.index_dir)

    @property
    def manifest(self) -> dict[str, Any]:
        """``manifest.json``: encoder, sizes, index types, build settings, skipped images, checksums."""
        return self.store.manifest

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
        if self.skipped_count:
            import warnings

            from unirag.errors import SkippedInputsWarning

            first = ", ".join(p for p, _ in self.skipped[:3])
            more = f" and {self.skipped_count - 3} more" if self.skipped_count > 3 else ""
            warnings.warn(f"{self.skipped_count} input(s) missing or unreadable, skipped: {first}{more} (reasons: "
                          "index.skipped, manifest.json)", SkippedInputsWarning, stacklevel=3)
        return self

    @property
    def dim(self) -> int:
        """Vector size."""
        return int(self.store.dim)

    @property
    def counts(self) -> dict[str, int]:
        """Vectors per candidate modality, e.g. ``{"text": 255, "image": 51}``."""
        return dict(self.store.counts)

    def __len__(self) -> int:
        return len(self.store)

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

        return Pool([self._candidate(m) for m in self.store.metas], images_root=self.images_root)

    def candidate(self, did: str) -> Candidate:
        """The candidate with this did (KeyError if the index has none)."""
        gid = self.store.gid_of(did)
        if gid is None:
            raise KeyError(f"no candidate {did!r} in index {self.path}")
        return self._candidate(self.store.metas[gid])

    @staticmethod
    def _candidate(meta) -> Candidate:
        return Candidate(did=meta.did, modality=meta.modality, txt=meta.txt, img_path=meta.img_path,
                         source_id=meta.source_id)

    def load_encoder(self, *, device: str | None = "auto", dtype: str | None = "auto") -> Encoder:
        """Load the encoder recorded in the manifest and check that it is the one that built the index."""
        from unirag.encoders.registry import load_encoder
        from unirag.index.store import check_encoder

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
        import numpy as np

        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim == 1:
            array = array[None, :]
        scores, ids = self.store.search(array, k, modality, where)
        metas = self.store.metas
        return [[Hit(metas[g].did, float(s), metas[g].modality.value)
                 for s, g in zip(row_s.tolist(), row_g.tolist(), strict=True) if g >= 0]
                for row_s, row_g in zip(scores, ids, strict=True)]

    # -- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """``{"path": ...}``: what :meth:`from_dict` reopens."""
        out = {"path": str(self.path)}
        if getattr(self.store, "memory", "mmap") != "mmap":
            out["memory"] = self.store.memory
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Index:
        """Reopen the index :meth:`to_dict` describes."""
        return cls.open(data["path"], verify=bool(data.get("verify", False)), memory=data.get("memory", "mmap"))

    def __repr__(self) -> str:
        return f"Index({str(self.path)!r}, {self.counts}, encoder={self.manifest['encoder'].get('name')!r})"


def _encoder_and_spec(encoder, device: str | None, dtype: str | None, autocast: str | None = None,
                      decode: int | str | None = None):
    """(spec to record, encoder object) for an encoder object, a spec string or None (offline), its
    decode workers set to ``decode`` when given; ``autocast`` goes to the loading."""
    from unirag.encoders.registry import load_encoder
    from unirag.runs.engine import EngineOptions

    spec, enc = (encoder, load_encoder(encoder, device=device, dtype=dtype,
                                       **({"autocast": autocast} if autocast else {}))) \
        if encoder is None or isinstance(encoder, str) else (getattr(encoder, "spec", None), encoder)
    if decode is not None:
        enc.decode_workers = EngineOptions(decode_workers=decode).decode_workers
    return spec, enc


def _pool_source(pool, images_root):
    """(pool JSONL path, images root) for a :class:`unirag.Pool` read from a file, or a path."""
    from unirag.data.pool import Pool
    from unirag.errors import ConfigError

    if isinstance(pool, Pool):
        if pool.path is None:
            raise ConfigError("this needs a pool read from a JSONL file (Pool.read), not in-memory candidates")
        return pool.path, images_root if images_root is not None else pool.images_root
    return pool, images_root
