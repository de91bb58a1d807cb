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

from unirag.errors import InputError, existing_path

BOM = codecs.BOM_UTF8


def decode_line(raw: bytes, path: Path | None, lineno: int, line_start: int | None = 0) -> str:
    """One line's bytes as text; the BOM is dropped from the file's first line. ``line_start``: the
    line's byte offset in the file (None when the caller does not know it)."""
    if lineno == 1 and raw.startswith(BOM):
        raw = raw[len(BOM):]
        line_start = len(BOM) if line_start is not None else None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"byte {e.start + 1} of the line" + (f", byte offset {line_start + e.start} in the file"
                                                      if line_start is not None else "")
        raise InputError(f"not valid UTF-8: byte 0x{raw[e.start:e.start + 1].hex()} at {where}; save the file "
                         "as UTF-8 (e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8)", path=path, line=lineno) from None


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
    return "".join(line for _, line in iter_text_lines(path))


def read_yaml_mapping(path: str | Path, what: str) -> dict:
    """The top-level mapping of the YAML file ``path`` (an empty file: {}); a missing file (``what`` names
    it), malformed YAML or any other top level is an InputError naming the file."""
    import yaml

    path = existing_path(path, what)
    try:
        raw = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as e:
        raise InputError(f"malformed YAML ({e})", path=path) from None
    if not isinstance(raw, dict):
        raise InputError("expected a mapping at the top level", path=path)
    return raw
