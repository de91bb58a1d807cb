"""Append-only JSONL result store that survives crashes and resumes.

One line per finished work item, written with a single ``write`` + flush + fsync under a lock, so
a crash can at worst leave a torn *last* line, which is dropped (and cut off) when the store is
opened again. The latest line per key wins: a failed item is recorded as a failure and retried on
the next run; :meth:`ResultStore.compact` rewrites the file with exactly one line per key.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unirag.errors import UniragError
from unirag.runs.atomic import atomic_write_lines

STATUS_OK = "ok"
STATUS_ERROR = "error"


class ResultStore:
    """A JSONL file of records keyed by ``key`` (e.g. ``qid``) with a ``status`` field."""

    def __init__(self, path: str | Path, key: str = "qid", fsync: bool = True) -> None:
        self.path = Path(path)
        self.key = key
        self.fsync = fsync
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}
        self.dropped_torn_line = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._load()
        self._fh = self.path.open("a", encoding="utf-8")

    def _load(self) -> None:
        if not self.path.exists():
            return
        good_bytes = 0
        with self.path.open("rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    self.dropped_torn_line = True  # torn write at crash time
                    break
                try:
                    rec = json.loads(raw)
                except json.JSONDecodeError:
                    # A torn line followed by later appends: skip it, keep the rest.
                    self.dropped_torn_line = True
                    good_bytes += len(raw)
                    continue
                good_bytes += len(raw)
                if isinstance(rec, dict) and self.key in rec:
                    self._latest[str(rec[self.key])] = rec
        if self.dropped_torn_line and self.path.stat().st_size > good_bytes:
            with self.path.open("r+b") as f:
                f.truncate(good_bytes)

    def append(self, record: dict[str, Any]) -> None:
        if self.key not in record:
            raise ValueError(f"record lacks key field {self.key!r}")
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
            self._latest[str(record[self.key])] = record

    def get(self, key: str) -> dict[str, Any] | None:
        return self._latest.get(str(key))

    def done_keys(self) -> set[str]:
        """Keys whose latest record succeeded: a rerun skips these and retries the rest."""
        return {k for k, r in self._latest.items() if r.get("status", STATUS_OK) == STATUS_OK}

    def records(self) -> Iterator[dict[str, Any]]:
        """Latest record per key."""
        return iter(list(self._latest.values()))

    def __len__(self) -> int:
        return len(self._latest)

    def compact(self, order: list[str] | None = None) -> int:
        """Rewrite atomically with one line per key (in ``order`` when given)."""
        with self._lock:
            keys = order if order is not None else list(self._latest)
            recs = [self._latest[k] for k in keys if k in self._latest]
            self._fh.close()
            n = atomic_write_lines(self.path, (json.dumps(r, ensure_ascii=False) for r in recs))
            self._fh = self.path.open("a", encoding="utf-8")
            return n

    def close(self) -> None:
        with self._lock:
            self._fh.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunLock:
    """Refuse to run two processes on the same output directory at once (advisory flock)."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / ".lock"
        self._fh = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("w")
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            raise UniragError(f"another unirag process is writing to {self.path.parent}; "
                              "wait for it to finish or choose another --out") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
