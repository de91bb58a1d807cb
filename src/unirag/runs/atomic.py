"""Write files so that a crash leaves either the old file or the new one, never half of one.

Everything goes to a temporary file in the target's folder, is fsynced, then renamed over the
target (``os.replace`` is atomic on POSIX filesystems).

JSON and text written here (manifests, prompt logs, metrics, reports) are masked by
:mod:`unirag.redact` first: no secret from the environment reaches these files. Lines and bytes
(pools, retrieval runs, images) are the user's data and are written as given.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from unirag.redact import redact, redact_json


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temp file beside ``path``; on clean exit fsync and rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and not e.filename:
            e.filename = str(path)  # a failed write() names no file: say which one could not be written
        raise


def atomic_write_lines(path: str | Path, lines: Iterable[str]) -> int:
    """Write ``lines`` (newline added) to ``path``. Returns the line count."""
    n = 0
    with atomic_open(path) as f:
        for line in lines:
            f.write(line)
            f.write("\n")
            n += 1
    return n


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as f:
        f.write(redact(text))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    with atomic_open(path) as f:
        f.write(json.dumps(redact_json(obj), indent=2, ensure_ascii=False) + "\n")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)
