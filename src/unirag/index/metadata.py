"""Candidate metadata in one SQLite file, looked up by row id on demand.

Why SQLite: it is in the standard library (no extra dependency for the base index), opens in
milliseconds at any size (nothing is parsed up front, unlike JSON lines: 5 s per million rows),
and its B-tree indexes answer the two lookups retrieval needs besides "row -> record": "did ->
row" and "pairing id -> rows". Readers open it ``immutable`` (no locking, works on read-only and
network disks); the file is never modified after the build.

A row is keyed by (modality, local row): local row ``i`` of a modality describes vector ``i`` of
that modality's sub-index.
"""

from __future__ import annotations

import bisect
import itertools
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from unirag.data.records import Candidate, Modality
from unirag.errors import ConfigError, InputError


class MetaTable(Sequence[Candidate]):
    """Read-only, lazily loaded ``metas[gid]`` over the SQLite file (global ids: the modalities' rows one
    after the other, in the order of ``counts``, the manifest's)."""

    def __init__(self, path: Path, counts: dict[Modality, int]) -> None:
        self.path = path
        self.offsets = dict(zip(counts, itertools.accumulate([0, *counts.values()]), strict=False))
        self._total = sum(counts.values())
        self.db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True,
                                  check_same_thread=False)
        self._lock = threading.Lock()
        self._query("SELECT 1 FROM meta LIMIT 1")  # a file that is no SQLite database fails here, at open
        self._get = lru_cache(maxsize=1 << 16)(self._fetch)

    def __len__(self) -> int:
        return self._total

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        """The rows of one read, under the lock. A page of the file damaged in place (same size) shows up
        only when a query reads it: one error pointing to ``unirag index verify``, not sqlite's traceback."""
        try:
            with self._lock:
                return self.db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as e:
            raise InputError(f"cannot read the metadata file ({e}): the index files are damaged; run "
                             "'unirag index verify' on the index directory, then rebuild the index",
                             path=self.path) from None

    def locate(self, gid: int) -> tuple[Modality, int]:
        """(modality, local row) of a global id."""
        if not 0 <= gid < self._total:
            raise IndexError(f"candidate id {gid} out of range (0..{self._total - 1})")
        modality = list(self.offsets)[bisect.bisect_right(list(self.offsets.values()), gid) - 1]  # ascending
        return modality, gid - self.offsets[modality]

    def __getitem__(self, gid):  # type: ignore[override]
        gid = int(gid)
        if gid < 0:
            gid += self._total
        return self._get(gid)

    def _fetch(self, gid: int) -> Candidate:
        modality, row = self.locate(gid)
        found = self._query("SELECT did, txt, img_path, source_id FROM meta WHERE modality=? AND row=?",
                            (modality.value, row))
        if not found:
            raise InputError(f"no metadata for row {row} of {modality.value}; rebuild the index", path=self.path)
        did, txt, img, sid = found[0]
        return Candidate(did, modality, txt, img, source_id=sid)

    def __iter__(self) -> Iterator[Candidate]:
        for modality in self.offsets:
            last = -1
            while True:  # keyset pages: bounded memory at any size, no cursor held between pages
                rows = self._query("SELECT row, did, txt, img_path, source_id FROM meta WHERE modality=? AND row > ? "
                                   "ORDER BY row LIMIT 10000", (modality.value, last))
                if not rows:
                    break
                for _row, did, txt, img, sid in rows:
                    yield Candidate(did, modality, txt, img, source_id=sid)
                last = rows[-1][0]

    def gids(self, column: str, value: str) -> list[int]:
        """Global ids of the candidates whose ``column`` (``did`` or ``source_id``: indexed) is ``value``,
        sorted."""
        rows = self._query(f"SELECT modality, row FROM meta WHERE {column}=?", (value,))
        return sorted(self.offsets[Modality(m)] + int(r) for m, r in rows)

    # -- filters (see unirag.retrieval.selection) ------------------------------------------------
    def rows_where(self, where: Sequence[tuple[str, Sequence[str]]]) -> dict[Modality, list[int]]:
        """Local rows per modality of the candidates matching every ``(field, values)`` condition
        (AND over conditions, OR over one condition's values), in row order. Fields: ``dataset``
        (the M-BEIR dataset of the did prefix, by id or name), ``source_id``, ``did``, or any key of
        the candidate's ``src_content`` JSON. One indexed SQL scan; the caller caches the answer."""
        from unirag.encoders.instructions import DATASET_IDS

        clauses, args, fields = [], [], {}  # fields: the src_content keys filtered on -> their JSON paths
        for name, values in where:
            marks = ", ".join("?" * len(values))
            if name == "dataset":  # the did prefixes naming the datasets: "mscoco" or "9" -> {"9", "mscoco",
                prefixes: set[str] = set()  # "coco"} (M-BEIR: "9:123"; unirag's importers: "coco:img:...")
                for v in values:
                    key = str(v).strip().lower()
                    ident = key if key.isdigit() else DATASET_IDS.get(key)
                    prefixes.update([key] if ident is None else
                                    [key, ident, *(n for n, i in DATASET_IDS.items() if i == ident)])
                clauses.append(f"lower(substr(did, 1, instr(did, ':') - 1)) IN ({', '.join('?' * len(prefixes))})")
                args += sorted(prefixes)
            elif name in ("source_id", "did"):
                clauses.append(f"{name} IN ({marks})")
                args += list(values)
            else:  # indexes built before filters existed store no src_content
                if "src_content" not in [r[1] for r in self._query("PRAGMA table_info(meta)")]:
                    raise ConfigError(f"this index does not store src_content (built before filters on its "
                                      f"fields existed), so it cannot filter on {name!r}; rebuild the index")
                fields[name] = path = "$." + ".".join(f'"{part}"' for part in name.split("."))
                clauses.append("(CASE WHEN json_valid(src_content) THEN CAST(json_extract(src_content, ?) AS TEXT) "
                               f"END) IN ({marks})")
                args += [path, *values]
        sql = "SELECT modality, row FROM meta" + (" WHERE " + " AND ".join(clauses) if clauses else "")
        out: dict[Modality, list[int]] = {m: [] for m in self.offsets}
        for m, r in self._query(sql + " ORDER BY modality, row", args):
            out[Modality(m)].append(int(r))
        # nothing matched: a misspelt field must not pass for an empty answer; the first field no candidate
        # has is an error naming the fields candidates have (those of the first 10,000 rows: cheaply)
        for name, path in fields.items() if not any(out.values()) else ():
            if self._query("SELECT 1 FROM meta WHERE CASE WHEN json_valid(src_content) THEN json_type(src_content, ?) "
                           "END IS NOT NULL LIMIT 1", (path,)):
                continue
            keys = [k for (k,) in self._query(
                "SELECT DISTINCT j.key FROM (SELECT src_content FROM meta WHERE CASE WHEN json_valid(src_content) "
                "THEN json_type(src_content) END = 'object' LIMIT 10000) AS s, json_each(s.src_content) AS j ORDER BY j.key")]
            known = ", ".join(["dataset", "modality", "source_id", "did", *[k for k in keys if k != "source_id"]])
            raise ConfigError(f"no candidate has the filter field {name!r}; known fields: {known}")
        return out
