"""Reading the text files users give unirag (JSONL, CSV/TSV, COCO JSON, qrels, YAML, id lists).

Files are UTF-8; a UTF-8 byte-order mark (which Excel and some Windows editors write) is accepted
and dropped. A byte that is not valid UTF-8 is reported as one :class:`~unirag.errors.InputError`
naming the file, the line and the byte offset, with the fix, instead of a ``UnicodeDecodeError``
from deep inside a reader.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from unirag.errors import InputError

BOM = codecs.BOM_UTF8


def _bad_utf8(path: Path | None, line: int, line_start: int | None, data: bytes,
              err: UnicodeDecodeError) -> InputError:
    byte = data[err.start:err.start + 1].hex()
    where = f"byte {err.start + 1} of the line" + (f", byte offset {line_start + err.start} in the file"
                                                    if line_start is not None else "")
    return InputError(f"not valid UTF-8: byte 0x{byte} at {where}; save the file as UTF-8 "
                      "(e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8)", path=path, line=line)


def decode_line(raw: bytes, path: Path | None, lineno: int, line_start: int | None = 0) -> str:
    """One line's bytes as text; the BOM is dropped from the file's first line. ``line_start``: the
    line's byte offset in the file (None when the caller does not know it)."""
    if lineno == 1 and raw.startswith(BOM):
        raw = raw[len(BOM):]
        line_start = len(BOM) if line_start is not None else None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad_utf8(path, lineno, line_start, raw, e) from None


def iter_text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number from 1, line)`` for every line of ``path``, line endings kept (as ``open()`` in
    binary mode splits them), streaming."""
    path = Path(path)
    offset = 0
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            yield lineno, decode_line(raw, path, lineno, offset)
            offset += len(raw)


def read_text(path: str | Path) -> str:
    """The whole file as text (BOM dropped); invalid UTF-8 is an InputError naming line and byte offset."""
    path = Path(path)
    data = path.read_bytes()
    start = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = start + e.start
        line_start = data.rfind(b"\n", 0, at) + 1
        lineno = data.count(b"\n", 0, at) + 1
        raise _bad_utf8(path, lineno, line_start, data[line_start:at + 1],
                        UnicodeDecodeError("utf-8", data, at - line_start, at - line_start + 1, e.reason)) from None
