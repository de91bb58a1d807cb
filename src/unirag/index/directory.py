"""Who may touch what inside an index directory: OS locks, the atomic swap, and safe cleanup.

``manifest.json`` names the current data folder ``data-<id>/``. A build writes a new data folder
holding an exclusive ``flock`` on ``data-<id>.lock`` and publishes it by replacing ``manifest.json``
with one ``os.replace``, the only step that changes what readers see: a build killed at any point
leaves the previous index readable, and the next build (or cleanup) removes its folder.

Ownership is decided by locks, never by process ids (a pid means nothing on another machine of a
shared/NFS disk, and is reused): a folder that is not the current one is removed only when its build
lock can be taken. Registrations, swaps and cleanups hold ``<index>/.lock`` exclusively; readers hold
it shared while they open files, so a cleanup cannot delete a folder between a reader reading the
manifest and opening the files (opened or memory-mapped files stay readable once deleted).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from unirag.errors import InputError
from unirag.index.manifest import MANIFEST
from unirag.runs.atomic import atomic_write_json

INDEX_LOCK = ".lock"
DATA_PREFIX = "data-"
MANIFEST_TMP_PREFIX = f".{MANIFEST}."  # atomic_open's temporary names


@contextlib.contextmanager
def index_lock(index_dir: Path, shared: bool = False, name: str = INDEX_LOCK) -> Iterator[None]:
    """Hold ``<index>/.lock`` (shared for readers, exclusive for writers) for the block.

    A reader on a read-only copy without a lock file proceeds unlocked (nothing can change there).
    """
    path = index_dir / name
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        if not shared:
            raise
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            yield
            return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class BuildSlot:
    """A new data folder inside ``index_dir``, locked for the lifetime of this object; a folder that holds
    something other than a unirag index is refused."""

    def __init__(self, index_dir: Path) -> None:
        if index_dir.exists() and not (index_dir / MANIFEST).exists():
            if not index_dir.is_dir():
                raise InputError("the index output path exists and is not a directory", path=index_dir)
            foreign = [p.name for p in index_dir.iterdir() if p.name not in (INDEX_LOCK, "shards")
                       and not p.name.startswith((DATA_PREFIX, MANIFEST_TMP_PREFIX))]
            if foreign:
                raise InputError(f"the output folder is not empty and holds no unirag index (found {foreign[0]!r}); "
                                 "choose another --out or empty it", path=index_dir)
        self.index_dir = index_dir
        self.created_dir = not index_dir.exists()
        index_dir.mkdir(parents=True, exist_ok=True)
        self.name = f"{DATA_PREFIX}{uuid.uuid4().hex[:12]}"
        self.path = index_dir / self.name
        self.lock_path = index_dir / f"{self.name}.lock"
        with index_lock(index_dir):
            cleanup(index_dir)
            self._fd: int | None = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # a fresh lock file, made under the index lock: no one waits
            self.path.mkdir()

    def publish(self, manifest: dict) -> None:
        """Make this data folder the current index: one atomic rename of the manifest, then cleanup."""
        with index_lock(self.index_dir):
            atomic_write_json(self.index_dir / MANIFEST, manifest)
            fd = os.open(self.index_dir, os.O_RDONLY)  # the rename itself reaches the disk
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._release(delete_folder=False)
            cleanup(self.index_dir)

    def abort(self) -> None:
        """Remove the unfinished data folder (the current index is untouched)."""
        if self._fd is None:
            return
        with index_lock(self.index_dir):
            self._release(delete_folder=True)
            # a first build that failed leaves no folder
            if self.created_dir and {p.name for p in self.index_dir.iterdir()} <= {INDEX_LOCK}:
                (self.index_dir / INDEX_LOCK).unlink(missing_ok=True)
                self.index_dir.rmdir()

    def _release(self, delete_folder: bool) -> None:
        if delete_folder:
            shutil.rmtree(self.path, ignore_errors=True)
        self.lock_path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


def cleanup(index_dir: Path) -> None:
    """Remove data folders of dead builds and superseded indexes, and lock files whose folder is gone;
    call under the exclusive index lock. Kept: the folder ``manifest.json`` names, and every folder
    whose build lock is held by a live process."""
    # a publish killed mid-write left its manifest's temporary file (publishes hold the lock)
    for tmp in index_dir.glob(f"{MANIFEST_TMP_PREFIX}*"):
        tmp.unlink(missing_ok=True)
    try:  # the data folder manifest.json names now (none if it cannot be read: cleanup must not fail)
        current = str(json.loads((index_dir / MANIFEST).read_text(encoding="utf-8"))["data"])
    except (OSError, ValueError, RecursionError, KeyError, TypeError):  # missing, not UTF-8/JSON/an object
        current = None
    for name in sorted({p.name.removesuffix(".lock") for p in index_dir.glob(f"{DATA_PREFIX}*")} - {current}):
        lock_path = index_dir / f"{name}.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(index_dir / name, ignore_errors=True)
            lock_path.unlink(missing_ok=True)
        except BlockingIOError:
            continue  # a live build owns it
        finally:
            os.close(fd)

