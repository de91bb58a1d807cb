"""``unirag.Pool``: the candidate pool (images, captions, image+caption items) as users hold it.

A pool is read from an M-BEIR pool JSONL file (streamed: iterating never holds more than one line)
or made from records in memory. It knows the folder its relative image paths are relative to
(``images_root``), so whoever gets a candidate from it can open the image without being told again.
Candidates that share a ``source_id`` are the pool's own image–caption pairing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from unirag.data.records import Candidate, Modality, resolve_image
from unirag.errors import InputError, existing_path


class Pool:
    """An M-BEIR candidate pool. Use :meth:`read` for a file, :meth:`from_records` or
    :meth:`from_pairs` for data in memory.

    Iterating yields :class:`~unirag.data.records.Candidate` records in file order;
    ``pool[did]`` looks one up (the lookup table is built on first use).
    """

    def __init__(self, candidates: Iterable[Candidate] | None = None, *, path: str | Path | None = None,
                 images_root: str | Path | None = None) -> None:
        if (candidates is None) == (path is None):
            raise ValueError("Pool needs exactly one of candidates (in memory) or path (a pool JSONL file)")
        self.path = Path(path) if path is not None else None
        self.images_root = Path(images_root).absolute() if images_root is not None else None
        self._records: list[Candidate] | None = list(candidates) if candidates is not None else None

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def read(cls, path: str | Path, images_root: str | Path | None = None) -> Pool:
        """A pool JSONL file (M-BEIR); ``images_root`` is the folder its image paths are relative to."""
        return cls(path=existing_path(path, "candidate pool"), images_root=images_root)

    @classmethod
    def from_records(cls, records: Iterable[Candidate | Mapping[str, Any]],
                     images_root: str | Path | None = None) -> Pool:
        """Candidates, or dicts in the M-BEIR pool line format (``did``, ``modality``, ``txt``,
        ``img_path``, ``src_content``; ``source_id`` may be given directly)."""
        from unirag.data.mbeir import duplicate_did, parse_candidate

        out: dict[str, Candidate] = {}
        for i, r in enumerate(records):
            c = r
            if not isinstance(r, Candidate):  # read as the pool file reader reads a line
                try:
                    c = parse_candidate(dict(r), None, None)
                except InputError as e:
                    raise InputError(e.reason, field=f"records[{i}].{e.field}") from None
                if r.get("source_id") is not None:
                    c.source_id = str(r["source_id"])
            if c.did in out:
                raise duplicate_did(c.did, None, None, None)
            out[c.did] = c
        return cls(out.values(), images_root=images_root)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, str | Iterable[str]] | tuple[Any, Any, Mapping[str, Any]]], *,
                   images_root: str | Path | None = None, prefix: str = "item",
                   images_dir: str | Path | None = None) -> Pool:
        """A pool from ``(image, caption or captions)`` tuples: one image candidate per distinct
        image, with the captions of every tuple that gives it, all sharing a source id (dids
        ``{prefix}:img:N``, ``{prefix}:txt:N:J``; N counts distinct images in order of appearance).

        ``image``: a path (relative ones start at ``images_root``), or the image itself (a PIL image,
        encoded bytes or a uint8 array). An index outlives the process that built it, so images held
        in memory are saved once as lossless PNG files named by their content in ``images_dir``
        (required then), which becomes the pool's images root for them; hits from an index of this
        pool give those files as ``pair.image``, with exactly the pixels given.

        The same image given twice (the same path, or files with the same content: one photo listed
        once per caption, as caption datasets often are) is one candidate: indexed once, it comes
        back once, not once per caption.

        A pair may carry metadata as a third item, ``(image, captions, {"gender": "Men", ...})``: it
        goes into the ``src_content`` of the image and of its captions, so ``where={"gender": "Men"}``
        filters either modality (metadata given for one image twice is merged, later keys winning).
        """
        import hashlib
        import json

        from unirag.data.images import check_image_like, save_png_by_content
        from unirag.errors import ConfigError

        # every pair checked before any image is saved; an InputError names pairs[i] and what was expected
        if isinstance(pairs, str | bytes | Mapping) or not isinstance(pairs, Iterable):
            raise InputError(f"expected a list of (image, caption) pairs, got {type(pairs).__name__}", field="pairs")
        checked = []
        for n, item in enumerate(pairs):
            where = f"pairs[{n}]"
            if not isinstance(item, tuple | list) or len(item) not in (2, 3):
                got = f"a {len(item)}-item {type(item).__name__}" if isinstance(item, tuple | list) else type(item).__name__
                raise InputError(f"expected an (image, caption or list of captions[, metadata dict]) pair, got {got}",
                                 field=where)
            image, captions = item[0], item[1]
            meta = item[2] if len(item) == 3 else {}
            if not isinstance(meta, Mapping) or not all(isinstance(k, str) for k in meta):
                raise InputError(f"expected a metadata dict with string keys, got {type(meta).__name__}",
                                 field=f"{where}[2] (metadata)")
            if not isinstance(image, str | Path):  # paths may be relative to images_root: read when indexed
                check_image_like(image, f"{where}[0] (image)")
            texts = [captions] if isinstance(captions, str) else captions
            if texts is None or isinstance(texts, bytes | Mapping) or not isinstance(texts, Iterable):
                raise InputError(f"expected a caption string or a list of caption strings, got "
                                 f"{type(captions).__name__}", field=f"{where}[1] (captions)")
            texts = list(texts)
            bad = next((t for t in texts if not isinstance(t, str)), None)
            if bad is not None or not texts:
                raise InputError("expected caption strings, got " + (type(bad).__name__ + f" {bad!r}" if texts else
                                                                     "an empty list"), field=f"{where}[1] (captions)")
            if any(not t.strip() for t in texts):
                raise InputError(f"empty caption for image {image}", field=where)
            checked.append((image, texts, dict(meta)))
        groups: dict[str, tuple[str, list[str], dict[str, Any]]] = {}  # image key -> (path, captions, metadata)
        for n, (image, captions, meta) in enumerate(checked):
            if not isinstance(image, str | Path):
                if images_dir is None:
                    raise ConfigError(f"pairs[{n}] holds the image itself: pass images_dir= (a folder where the "
                                      "pool's images are saved as PNG files, so an index of it can show them later)")
                image = save_png_by_content(image, images_dir).absolute()
            # the same image: the same file content when it can be read, else the same path
            path = resolve_image(str(image), images_root)
            try:
                key = "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError:
                key = "path:" + str(Path(path).absolute())
            group = groups.setdefault(key, (str(image), [], {}))
            group[1].extend(captions)
            group[2].update(meta)
        out: list[Candidate] = []
        for n, (image, texts, meta) in enumerate(groups.values()):
            sid = f"{prefix}:{n}"
            src = json.dumps({**meta, "source_id": sid}, ensure_ascii=False, default=str) if meta else None
            out.append(Candidate(did=f"{prefix}:img:{n}", modality=Modality.IMAGE, img_path=image, source_id=sid,
                                 src_content=src))
            out.extend(Candidate(did=f"{prefix}:txt:{n}:{j}", modality=Modality.TEXT, txt=text, source_id=sid,
                                 src_content=src) for j, text in enumerate(texts))
        return cls(out, images_root=images_root)

    @classmethod
    def from_coco(cls, captions: str | Path, images_root: str | Path, *, name: str = "coco",
                  limit: int | None = None) -> Pool:
        """The pool ``unirag import coco`` writes (each image, then its captions; dids
        ``coco:img:<image id>``, ``coco:txt:<caption id>``), in memory, from a COCO captions file."""
        from unirag.data.importers.coco import read_coco
        from unirag.data.importers.writer import build_records

        items, _ = read_coco(captions, limit=limit)
        return cls(build_records(items, name=name)[0], images_root=images_root)

    # -- access ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Candidate]:
        if self._records is not None:
            return iter(self._records)
        from unirag.data.mbeir import read_candidates

        return read_candidates(self.path)

    def __len__(self) -> int:
        return len(self._records) if self._records is not None else self._count

    @functools.cached_property
    def _count(self) -> int:  # a file's lines, counted once, streaming
        return sum(1 for _ in self)

    @functools.cached_property
    def _table(self) -> dict[str, Candidate]:
        return {c.did: c for c in self}

    def __getitem__(self, did: str) -> Candidate:
        try:
            return self._table[did]
        except KeyError:
            raise KeyError(f"no candidate {did!r} in the pool") from None

    def __contains__(self, did: object) -> bool:
        return did in self._table

    def get(self, did: str, default: Candidate | None = None) -> Candidate | None:
        """The candidate with this did, or ``default``."""
        return self._table.get(did, default)

    def image_file(self, candidate: Candidate | str) -> Path | None:
        """The absolute image file of a candidate (or did); None for a caption."""
        c = self[candidate] if isinstance(candidate, str) else candidate
        p = resolve_image(c.img_path, self.images_root)
        return p.absolute() if p is not None else None

    def write(self, path: str | Path) -> Path:
        """Write the pool as M-BEIR JSONL (atomically); returns the path."""
        from unirag.data.mbeir import write_candidates

        write_candidates(path, self)
        return Path(path)

    # -- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A file-backed pool as ``{"path", "images_root"}`` (in-memory pools: :meth:`write` first)."""
        if self.path is None:
            raise ValueError("an in-memory pool has no path to record; write() it to a file first")
        return {"path": str(self.path), "images_root": str(self.images_root) if self.images_root else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pool:
        """The pool :meth:`to_dict` describes (read again from its file)."""
        return cls.read(data["path"], data.get("images_root"))

    def __repr__(self) -> str:
        where = f"path={str(self.path)!r}" if self.path is not None else f"{len(self)} records in memory"
        return f"Pool({where}, images_root={str(self.images_root) if self.images_root else None!r})"

