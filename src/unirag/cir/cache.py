"""On-disk caches that make X^R runs resumable and cheap to repeat.

* Agent calls: one append-only :class:`ResultStore` per role (``<cache>/calls/<role>.jsonl``), keyed
  by a hash of the role, the model configuration, the rendered prompt and the *content* hash of every
  image in it. A caption therefore depends on the image bytes, not its path: a pool is captioned once
  across runs that share the cache directory, and a killed run repeats no finished call. Several
  processes may share the directory at once: the stores lock the files (``fcntl.flock``), skip a
  call another process finished meanwhile, and store each finished call once.
* Embeddings: ``<cache>/emb/<name>-<hash>.npy`` keyed by encoder fingerprint and inputs.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unirag.messages import ImagePart, Message, TextPart
from unirag.runs.atomic import atomic_open
from unirag.runs.store import ResultStore
from unirag.runtime import file_sha256


def call_key(role: str, model_fingerprint: str, messages: Sequence[Message], fmt: str | None = None) -> str:
    """Cache key of one agent call: the prompt's text verbatim, its images by content (so moving files
    keeps the cache valid). ``fmt`` (a reply format other than the role's schema) is part of it, so a
    reply parsed one way is never reused as another (keys without ``fmt`` are unchanged)."""
    parts = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, TextPart):
                parts.append(["t", m.role, p.text])
            elif isinstance(p, ImagePart):
                parts.append(["i", m.role, file_sha256(Path(p.path)) if p.path is not None
                              else hashlib.sha256(p.data).hexdigest()])
    head = f"{role}|{model_fingerprint}" + (f"|fmt={fmt}" if fmt is not None else "")
    prompt = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return hashlib.sha256(f"{head}|{prompt}".encode()).hexdigest()[:32]


@dataclass
class CallRequest:
    """One agent call to make (or to find in the cache)."""

    key: str
    messages: list[Message]
    expect_answers: int | None = None
    fmt: str | None = None   # reply format instead of the role's schema (see agents.FORMATS)


class CallCache:
    """Per-role result stores under one directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self._stores: dict[str, ResultStore] = {}
        self._lock = threading.Lock()

    def store(self, role: str) -> ResultStore:
        with self._lock:
            if role not in self._stores:
                self._stores[role] = ResultStore(self.dir / "calls" / f"{role}.jsonl", key="key")
            return self._stores[role]

    def close(self) -> None:
        with self._lock:
            for s in self._stores.values():
                s.close()
            self._stores.clear()

    def embeddings(self, name: str, fingerprint: str, inputs: Sequence[str],
                   compute: Callable[[], np.ndarray]) -> np.ndarray:
        """Load ``name`` embeddings for exactly these inputs and encoder, or compute and save them."""
        h = hashlib.sha256(json.dumps([fingerprint, list(inputs)]).encode()).hexdigest()[:20]
        path = self.dir / "emb" / f"{name}-{h}.npy"
        if path.exists():
            arr = np.load(path)
            if arr.shape[0] == len(inputs):
                return arr
        arr = np.asarray(compute(), dtype=np.float32)
        with atomic_open(path, "wb") as f:
            np.save(f, arr)
        return arr
