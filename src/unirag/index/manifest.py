"""The on-disk layout of an index directory and its manifest.

An index directory holds, per candidate modality present in the pool, one FAISS file and one
metadata JSONL file whose line ``i`` describes vector ``i`` of that FAISS file, plus a
``manifest.json`` that says which encoder made the vectors, how the indexes were built, how many
items each holds, which pool images were skipped, and a SHA-256 of every file. The checksums are
verified on open so that a truncated copy or a half-synced disk is reported instead of searched.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from unirag.data.records import Modality
from unirag.errors import InputError

FORMAT_NAME = "unirag-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def file_stem(modality: Modality) -> str:
    """File-name-safe key of a modality ("image,text" -> "image_text")."""
    return modality.value.replace(",", "_")


def index_file(modality: Modality) -> str:
    return f"{file_stem(modality)}.faiss"


def meta_file(modality: Modality) -> str:
    return f"meta.{file_stem(modality)}.jsonl"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_manifest(index_dir: str | Path) -> dict[str, Any]:
    """Load and sanity-check ``manifest.json``; errors name the directory or file to look at."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        raise InputError("index directory not found (build it with 'unirag index build')", path=index_dir)
    path = index_dir / MANIFEST
    if not path.exists():
        raise InputError("not a unirag index: manifest.json is missing", path=index_dir)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"corrupt manifest ({e.msg})", path=path) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise InputError(f"not a {FORMAT_NAME} manifest", path=path, field="format")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(f"index format version {version!r} is not supported (expected {FORMAT_VERSION}); "
                         "rebuild the index", path=path, field="format_version")
    for key in ("encoder", "dim", "subindexes", "checksums"):
        if key not in manifest:
            raise InputError("missing required field", path=path, field=key)
    return manifest


def verify_checksums(index_dir: str | Path, manifest: dict[str, Any]) -> None:
    """Every file listed in the manifest must exist and hash to its recorded SHA-256."""
    index_dir = Path(index_dir)
    for name, expected in manifest["checksums"].items():
        path = index_dir / name
        if not path.exists():
            raise InputError("index file listed in manifest.json is missing; rebuild the index", path=path)
        actual = sha256_file(path)
        if actual != expected:
            raise InputError(f"checksum mismatch (expected sha256 {expected[:12]}..., got {actual[:12]}...): "
                             "the file is corrupt or was modified; rebuild the index", path=path)
