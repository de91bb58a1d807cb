"""The on-disk layout of an index directory and its manifest (format version 2).

``manifest.json`` names one data folder (``data-<id>/``) holding, per candidate modality, FAISS shard
files (``text.00000.faiss`` ...), for IVF-PQ the raw float32 vectors that re-score candidates
(``text.vectors.f32``), and ``meta.sqlite``, a row per candidate. The manifest records the encoder,
how each sub-index was built and how many items it holds, the skipped pool images, and the size and
SHA-256 of every data file. Opening checks sizes only (a truncated copy is caught at once);
``unirag index verify`` (:func:`verify_files`) re-hashes. Why a data folder: a rebuild writes a new
one and then swaps ``manifest.json`` in one atomic rename (:mod:`unirag.index.directory`).

Version 1 (one FAISS and one JSON-lines file per modality, hashed on every open) is no longer read:
opening one says to rebuild it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from unirag.data.jsonl import read_json_file
from unirag.errors import InputError

FORMAT_NAME = "unirag-index"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
META_FILE = "meta.sqlite"


def sha256_file(path: Path) -> str:
    """SHA-256 of the file's bytes as they are now (no cache: this is what checks them)."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_manifest(index_dir: str | Path) -> dict[str, Any]:
    """Load and sanity-check ``manifest.json``; errors name the directory or file to look at."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        raise InputError("index directory not found (build it with 'unirag index build')", path=index_dir)
    path = index_dir / MANIFEST
    if not path.exists():
        raise InputError("not a unirag index: manifest.json is missing", path=index_dir)
    try:
        manifest = read_json_file(path)
    except InputError as e:  # not UTF-8, not JSON, nested too deep
        raise InputError(f"corrupt manifest ({e.reason}); rebuild the index", path=path) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise InputError(f"not a {FORMAT_NAME} manifest", path=path, field="format")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(f"index format version {version!r} is not supported by this unirag (it reads version "
                         f"{FORMAT_VERSION}); rebuild the index with 'unirag index build'", path=path,
                         field="format_version")
    for key, kind in _REQUIRED.items():
        if key not in manifest:
            raise InputError("missing required field", path=path, field=key)
        if not isinstance(manifest[key], kind) or isinstance(manifest[key], bool):
            raise InputError(f"expected {_KIND_NAMES[kind]}, got {type(manifest[key]).__name__}; rebuild the index",
                             path=path, field=key)
    for group in ("subindexes", "files"):
        for name, entry in manifest[group].items():
            if not isinstance(entry, dict):
                raise InputError("expected a JSON object; rebuild the index", path=path, field=f"{group}.{name}")
    for name, entry in manifest["files"].items():
        if not isinstance(entry.get("size"), int) or not isinstance(entry.get("sha256"), str):
            raise InputError("expected an integer size and a sha256 string; rebuild the index", path=path,
                             field=f"files.{name}")
    return manifest


#: Fields every manifest has, with their JSON types (a hand-edited or damaged manifest is one error).
_REQUIRED: dict[str, type] = {"data": str, "encoder": dict, "dim": int, "subindexes": dict, "files": dict,
                              "meta_file": str}
_KIND_NAMES = {str: "a string", dict: "a JSON object", int: "an integer"}


def verify_files(index_dir: str | Path, manifest: dict[str, Any] | None = None,
                 hashes: bool = True) -> dict[str, Any]:
    """Check that every data file exists with its recorded size (cheap: no file is read), then, with
    ``hashes``, re-hash every data file against its recorded SHA-256 (reads everything).

    Raises :class:`InputError` naming the first bad file; returns ``{"files": n, "bytes": total}``.
    """
    manifest = manifest if manifest is not None else read_manifest(index_dir)
    folder = Path(index_dir) / manifest["data"]
    for name, entry in manifest["files"].items():
        path = folder / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise InputError("index file listed in manifest.json is missing; rebuild the index",
                             path=path) from None
        if size != entry["size"]:
            raise InputError(f"file is {size} bytes, manifest.json says {entry['size']}: the copy is truncated "
                             "or the file was modified; rebuild the index", path=path)
    for name, entry in manifest["files"].items() if hashes else ():
        path = folder / name
        actual = sha256_file(path)
        if actual != entry["sha256"]:
            raise InputError(f"checksum mismatch (expected sha256 {entry['sha256'][:12]}..., got {actual[:12]}...): "
                             "the file is corrupt or was modified; rebuild the index", path=path)
    return {"files": len(manifest["files"]), "bytes": sum(e["size"] for e in manifest["files"].values())}
