"""Exceptions that tell the user what to fix.

Every error raised for bad input names the place where the problem is (file, line, field) so that a
user can open the file and fix it without reading a traceback.
"""

from __future__ import annotations

from pathlib import Path


class UniragError(Exception):
    """Base class for all errors unirag raises on purpose (the CLI prints them without a traceback)."""


class InputError(UniragError):
    """Bad user input: a malformed file, a missing field, a value of the wrong type."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.reason = message
        where = []
        if self.path is not None:
            where.append(self.path if line is None else f"{self.path}:{line}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ConfigError(UniragError):
    """A wrong option: unknown model id, incompatible index/encoder, missing weights."""


class BackendError(UniragError):
    """A call to a model or API failed. ``retryable`` tells the run loop whether to try again."""

    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
