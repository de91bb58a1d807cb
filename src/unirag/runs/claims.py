"""Work claims, so that processes sharing a result store do not make the same call twice.

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

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from pathlib import Path
from typing import IO

from unirag.runs.atomic import atomic_write_lines


class Claims:
    """The claim file of one store; every method is called with the store's exclusive lock held."""

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
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._claims, self._offset, self._ino = {}, 0, None
            return
        if self._ino is not None and (st.st_ino != self._ino or st.st_size < self._offset):
            self._claims, self._offset = {}, 0  # rewritten by a compaction: read it again
        self._ino = st.st_ino
        if st.st_size == self._offset:
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read(st.st_size - self._offset)
        end = data.rfind(b"\n") + 1  # a line cut by a crash is ignored (claims are hints, not results)
        for raw in data[:end].splitlines():
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError, TypeError, KeyError, RecursionError):
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
            with contextlib.suppress(OSError):
                os.unlink(self.owners_dir / self._owner_id)  # type: ignore[operator]
            self._owner_fh.close()
            self._owner_fh = None
