"""Append-only JSONL result store that several threads *and processes* can share, crash-safe and resumable.

Every access to the file happens under an OS-level lock (``fcntl.flock`` on a sidecar
``<file>.lock`` that is never replaced, so the lock survives compaction):

* appends take the lock exclusively, first read what other processes appended since (so a key
  another process finished is not written twice), then write the whole line with a single
  ``write`` + flush + fsync;
* reading new lines takes the lock shared.

Because no writer ever leaves the lock with half a line in the file, a last line without its
newline seen *under the exclusive lock* can only be the leftover of a writer that crashed; it is cut
off then, and only then. A line that does not parse in the middle of the file (a crash followed by
later appends from an older version) is skipped. Both are reported: a ``logging`` warning with the
count and the first line numbers, and :attr:`ResultStore.dropped_lines` for callers.

A key's latest line wins, with one rule that keeps concurrent runs from losing work: once a key
has an ``ok`` record, later records for it are not written unless ``replace=True`` (a failure
somewhere else must not hide a finished result, and a finished result is not stored twice).
Run loops also :meth:`~ResultStore.claim` a key before working it (see :class:`Claims`),
so two processes do not make the same call at the same time.
Every record is masked by :func:`unirag.redact.redact_json` before it is written, so an error message
that quotes an API key never reaches the file. A failed item is recorded as a failure and retried on the next run; :meth:`ResultStore.compact`
rewrites the file with exactly one line per key.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from unirag.errors import UniragError
from unirag.redact import redact_json, secret_values
from unirag.runs.atomic import atomic_write_lines

STATUS_OK = "ok"
STATUS_ERROR = "error"

log = logging.getLogger(__name__)
_SHOW_LINES = 5


def _is_ok(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec.get("status", STATUS_OK) == STATUS_OK


class ResultStore(AbstractContextManager):
    """A JSONL file of records keyed by ``key`` (e.g. ``qid``) with a ``status`` field."""

    def __init__(self, path: str | Path, key: str = "qid") -> None:
        self.path = Path(path)
        self.key = key
        self._tlock = threading.RLock()
        self._depth = 0
        self._latest: dict[str, dict[str, Any]] = {}
        self._offset = 0          # bytes of the file consumed so far
        self._ino: int | None = None
        self._generation = b""   # compaction counter kept in the lock file (see _refresh_locked)
        self._lineno = 0          # complete lines consumed so far
        #: 1-based line numbers of lines that were dropped (torn by a crash, or not JSON)
        self.dropped_lines: list[int] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._claims = Claims(self.path)
        self._closed = False
        with self._locked(exclusive=True):
            self._refresh_locked(repair=True)

    # -- locking ------------------------------------------------------------------------------------
    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        """Thread lock + flock; re-entrant within a thread (the outermost call decides the mode)."""
        with self._tlock:
            if self._closed:
                raise UniragError(f"result store {self.path} is closed")
            if self._depth == 0:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextmanager
    def exclusive(self) -> Iterator[ResultStore]:
        """Hold the store's exclusive lock (e.g. to update a manifest consistently with the store)."""
        with self._locked(exclusive=True):
            self._refresh_locked(repair=True)
            yield self

    # -- reading ------------------------------------------------------------------------------------
    def _refresh_locked(self, repair: bool) -> None:
        """Consume lines appended since the last read (by anyone). Caller holds the flock."""
        generation = os.pread(self._lock_fd, 32, 0)
        # (The counter in the lock file catches a replacement even if the inode number is reused.)
        self._ino, start, data = _appended(self.path, self._ino, self._offset, generation != self._generation)
        self._generation = generation
        if start < self._offset:
            # Another process compacted (replaced) the file: read it again from the start. Its
            # records are the latest per key, so merging them into what we hold loses nothing.
            self._offset, self._lineno = 0, 0
        dropped: list[int] = []
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:
                # No newline at the end. Writers append whole lines under the exclusive lock, so
                # with that lock held this can only be left by a crashed writer: cut it off.
                if repair:
                    dropped.append(self._lineno + 1)
                    with self.path.open("r+b") as f:
                        f.truncate(self._offset + pos)
                        f.flush()
                        os.fsync(f.fileno())
                break  # under a shared lock leave it for the next exclusive holder
            raw = data[pos:nl + 1]
            pos = nl + 1
            self._lineno += 1
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                dropped.append(self._lineno)
                continue
            if isinstance(rec, dict) and self.key in rec:
                self._latest[str(rec[self.key])] = rec
        self._offset += pos
        if dropped:
            self.dropped_lines.extend(dropped)
            shown = ", ".join(str(n) for n in dropped[:_SHOW_LINES])
            log.warning("%s: dropped %d unreadable line(s) (torn by a crashed writer), line(s) %s%s",
                        self.path, len(dropped), shown, " ..." if len(dropped) > _SHOW_LINES else "")

    def refresh(self) -> None:
        """Read what other processes appended since the last read."""
        with self._locked(exclusive=False):
            self._refresh_locked(repair=False)

    def is_done(self, key: str, refresh: bool = True) -> bool:
        """Whether ``key`` has an ``ok`` record, looking at other processes' appends first."""
        if refresh and not _is_ok(self._latest.get(str(key))):
            self.refresh()
        return _is_ok(self._latest.get(str(key)))

    # -- writing ------------------------------------------------------------------------------------
    def claim(self, key: str) -> bool:
        """Reserve ``key`` before working it. False when it is already done, or claimed by another
        live process (which will store it: wait for its record with :meth:`is_done`/:meth:`get`)."""
        k = str(key)
        with self.exclusive():
            if _is_ok(self._latest.get(k)):
                return False
            return self._claims.take(k)

    def append(self, record: dict[str, Any], replace: bool = False) -> dict[str, Any]:
        """Store ``record``; returns the record that stands for its key afterwards.

        Unless ``replace``, nothing is written when the key already has an ``ok`` record (written
        by this or another process): that record is returned instead.
        """
        if self.key not in record:
            raise ValueError(f"record lacks key field {self.key!r}")
        k = str(record[self.key])
        masked = redact_json(record)  # a provider's error may quote the API key it was sent
        line = (json.dumps(masked, ensure_ascii=False) + "\n").encode("utf-8")
        with self.exclusive():
            current = self._latest.get(k)
            if not replace and _is_ok(current):
                self._claims.release(k)
                return current
            with self.path.open("ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
                if self._ino is None:
                    self._ino = os.fstat(f.fileno()).st_ino
            self._offset += len(line)
            self._lineno += 1
            self._latest[k] = masked
            self._claims.release(k)
            return record  # itself (callers tell "mine was written" by identity), as given

    def get(self, key: str) -> dict[str, Any] | None:
        return self._latest.get(str(key))

    def done_keys(self) -> set[str]:
        """Keys whose latest record succeeded: a rerun skips these and retries the rest."""
        return {k for k, r in self._latest.items() if _is_ok(r)}

    def records(self) -> Iterator[dict[str, Any]]:
        """Latest record per key."""
        return iter(list(self._latest.values()))

    def __len__(self) -> int:
        return len(self._latest)

    def compact(self, order: list[str] | None = None) -> int:
        """Rewrite atomically with one line per key (in ``order`` when given, then any others).

        Runs under the exclusive lock after reading every other process's appends, so a record
        written elsewhere is kept; writers reopen the file for each append and so follow the new one.
        """
        with self.exclusive():
            keys = list(order) if order is not None else []
            seen = set(keys)
            keys += [k for k in self._latest if k not in seen]
            recs = [self._latest[k] for k in keys if k in self._latest]
            # (masked again: lines written by an older version, or appended by hand, may hold a secret)
            secrets = secret_values()

            def lines() -> Iterator[str]:
                return (json.dumps(redact_json(r, secrets=secrets), ensure_ascii=False) for r in recs)

            if _file_holds(self.path, lines()):  # already compact: leave the file (and its mtime) alone
                self._claims.compact()
                return len(recs)
            n = atomic_write_lines(self.path, lines())
            st = self.path.stat()
            self._offset, self._ino, self._lineno = st.st_size, st.st_ino, n
            count = int(self._generation) + 1 if self._generation.isdigit() else 1
            self._generation = str(count).encode()
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, self._generation, 0)
            self._claims.compact()
            return n

    def close(self) -> None:
        with self._tlock:
            if not self._closed:
                self._closed = True
                self._claims.close()
                os.close(self._lock_fd)

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def RunLock(directory: str | Path) -> Iterator[None]:
    """``with RunLock(out):`` refuses to run two processes on the same output directory at once (advisory
    flock on ``OUT/.lock``, released when the file closes)."""
    path = Path(directory) / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UniragError(f"another unirag process is writing to {path.parent}; "
                              "wait for it to finish or choose another --out") from None
        yield


def _appended(path: Path, ino: int | None, offset: int, replaced: bool = False) -> tuple[int | None, int, bytes]:
    """What was appended to ``path`` since its first ``offset`` bytes were read from inode ``ino``: (its inode
    now, None when there is no file; where the bytes start: ``offset``, or 0 when the file is gone or was
    replaced since (another inode, shorter than ``offset``, or ``replaced``); the bytes)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None, 0, b""
    if ino is not None and (replaced or st.st_ino != ino or st.st_size < offset):
        offset = 0
    if st.st_size == offset:
        return st.st_ino, offset, b""
    with path.open("rb") as f:
        f.seek(offset)
        return st.st_ino, offset, f.read(st.st_size - offset)


def _file_holds(path: Path, lines: Iterator[str]) -> bool:
    """Whether ``path`` holds exactly ``lines``, one per line (read until the first difference)."""
    try:
        with open(path, encoding="utf-8") as f:
            return all(a is not None and b is not None and a == b + "\n"
                       for a, b in itertools.zip_longest(f, lines))
    except (OSError, UnicodeDecodeError):
        return False


class Claims:
    """The claim file of one store (work claims, so that processes sharing a result store do not make the
    same call twice); every method is called with the store's exclusive lock held.

    Before working an item, a process claims its key: a line ``{"key", "owner"}`` in ``<store>.claims``
    (written under the store's exclusive lock). Another process that finds a live claim leaves the
    item to its owner and waits for its record instead of calling the model again.

    Liveness is decided by a lock, never by a PID (PIDs mean nothing across machines sharing a disk):
    each owner holds an exclusive ``flock`` on its own file ``<store>.owners/<owner id>`` for as long
    as its store is open. The kernel drops the lock when the process dies, however it dies, so a
    claim whose owner file can be locked by someone else is stale and is taken over. An owner
    creates and locks its file before it writes its first claim, so a checker never sees a claim of
    an owner that is still starting up. Appending a record for a claimed key releases the claim.
    """

    def __init__(self, store_path: Path) -> None:
        self.path = store_path.with_name(store_path.name + ".claims")
        self.owners_dir = store_path.with_name(store_path.name + ".owners")
        self._owner_id: str | None = None
        self._owner_fh: IO | None = None
        self._claims: dict[str, str] = {}   # key -> owner id, as read from the file
        self._offset = 0
        self._ino: int | None = None

    # -- owners -------------------------------------------------------------------------------------
    def owner(self) -> str:
        """This store's owner id; its owner file is created and locked on first use."""
        if self._owner_id is None:
            self.owners_dir.mkdir(parents=True, exist_ok=True)
            owner_id = uuid.uuid4().hex
            fh = (self.owners_dir / owner_id).open("w")
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            self._owner_id, self._owner_fh = owner_id, fh
        return self._owner_id

    def _alive(self, owner: str) -> bool:
        if owner == self._owner_id:
            return True
        path = self.owners_dir / owner
        try:
            fh = path.open("r")
        except FileNotFoundError:
            return False
        with fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True  # its process holds the lock: alive
            path.unlink(missing_ok=True)  # its process is gone; nobody will lock this file again
            return False

    # -- the claim file -----------------------------------------------------------------------------
    def _refresh(self) -> None:
        self._ino, start, data = _appended(self.path, self._ino, self._offset)
        if start < self._offset:
            self._claims, self._offset = {}, 0  # rewritten by a compaction (or gone): read it again
        end = data.rfind(b"\n") + 1  # a line cut by a crash is ignored (claims are hints, not results)
        for raw in data[:end].splitlines():
            with suppress(json.JSONDecodeError, UnicodeDecodeError, TypeError, KeyError, RecursionError):
                rec = json.loads(raw)
                if rec.get("released"):
                    if self._claims.get(str(rec["key"])) == rec["owner"]:
                        del self._claims[str(rec["key"])]
                else:
                    self._claims[str(rec["key"])] = str(rec["owner"])
        self._offset += end

    def _write(self, rec: dict) -> None:
        line = (json.dumps(rec) + "\n").encode()
        with self.path.open("ab") as f:
            f.write(line)
        self._offset += len(line)
        if self._ino is None:
            self._ino = self.path.stat().st_ino

    def take(self, key: str) -> bool:
        """Claim ``key`` unless another live owner holds it."""
        self._refresh()
        holder = self._claims.get(key)
        if holder is not None and holder != self._owner_id and self._alive(holder):
            return False
        me = self.owner()
        if holder != me:
            self._write({"key": key, "owner": me})
            self._claims[key] = me
        return True

    def release(self, key: str) -> None:
        """Called after a record for ``key`` was appended: others need not wait for it any more."""
        if self._owner_id is None:
            return
        self._refresh()
        if self._claims.get(key) == self._owner_id:
            self._write({"key": key, "owner": self._owner_id, "released": True})
            del self._claims[key]

    def compact(self) -> None:
        """Keep only the claims of live owners (the file otherwise grows with every item)."""
        self._refresh()
        live = {k: o for k, o in self._claims.items() if self._alive(o)}
        if not live and not self.path.exists():
            return
        atomic_write_lines(self.path, (json.dumps({"key": k, "owner": o}) for k, o in live.items()))
        st = self.path.stat()
        self._claims, self._offset, self._ino = live, st.st_size, st.st_ino

    def close(self) -> None:
        if self._owner_fh is not None:
            with suppress(OSError):
                os.unlink(self.owners_dir / self._owner_id)  # type: ignore[operator]
            self._owner_fh.close()
            self._owner_fh = None
