"""Read JSONL files one JSON object per line, with errors that name the file and line.

Every JSONL reader in unirag (M-BEIR files, importer inputs, run files) goes through this one
function so that a malformed line is reported the same way everywhere (``path:line: malformed
JSON ...``) and blank lines are skipped the same way. :func:`read_json_file` does the same for a
whole JSON file (manifests). Bytes that are not UTF-8 and JSON nested too deep for the parser
(``[[[[...`` 100,000 levels: Python's ``RecursionError``) are one-line errors too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unirag.data.text import decode_line, iter_text_lines, read_text
from unirag.errors import InputError, existing_path


def iter_json_lines(path: str | Path, *, what: str = "file") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number from 1, object)`` for each non-blank line of ``path``.

    Raises :class:`InputError` naming the file (``"<what> not found"``) when it is missing, and the
    file and line when a line is not valid JSON or not a JSON object. Streaming, so large pools are
    never held in memory twice.
    """
    path = existing_path(path, what)
    for lineno, line in iter_text_lines(path):
        if line.strip():
            yield lineno, parse_json_line(line, path, lineno)


def parse_json_line(line: str | bytes, path: Path, lineno: int) -> dict[str, Any]:
    """One JSONL line as an object, or :class:`InputError` naming ``path`` and ``lineno``.

    For readers that find their lines themselves (e.g. a pool shard read from a byte offset). The
    line ending is dropped first, so a line cut short is reported at its end, not at "column 1" of
    the next line; bytes must be UTF-8 (see :mod:`unirag.data.text`)."""
    if isinstance(line, bytes | bytearray):
        line = decode_line(bytes(line), path, lineno, line_start=None)
    obj = parse_json(line.rstrip("\r\n"), path, lineno)
    if not isinstance(obj, dict):
        raise InputError("expected a JSON object per line", path=path, line=lineno)
    return obj


def parse_json(text: str, path: str | Path | None, line: int | None = None) -> Any:
    """``json.loads(text)``, or :class:`InputError` naming ``path`` and the line (``line``: the JSONL
    line ``text`` is; None: ``text`` is a whole file) for malformed or too deeply nested JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON ({e.msg} at column {e.colno})", path=path,
                         line=line if line is not None else e.lineno) from None
    except RecursionError:
        raise InputError("JSON nested too deeply to read (thousands of levels of [ or {)", path=path,
                         line=line) from None


def read_json_file(path: str | Path) -> Any:
    """A whole JSON file (UTF-8, BOM allowed); every way it can be malformed is one :class:`InputError`."""
    return parse_json(read_text(path), path)
