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
    """A call to a model or API failed. ``retryable`` tells the run loop whether to try again.

    ``kind`` names the failure for run records and reports: ``"transport"`` (timeouts, dropped
    connections), ``"http"`` (an error status), ``"malformed"`` (see :class:`MalformedResponseError`),
    ``"refused"`` (content filters), ``"oom"`` (a local model ran out of GPU memory: batched runs retry
    the batch item by item) or ``"backend"`` (anything else a backend reports on purpose).
    Only transport errors, timeouts, 429 and 5xx are retryable; a bug in the calling code is not a
    BackendError at all and propagates with its traceback.
    """

    kind = "backend"

    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None,
                 status: int | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        if kind is not None:
            self.kind = kind


class MalformedResponseError(BackendError):
    """The model or server answered, but not in the form asked for (unparsable body, no choices,
    a reply that does not match the requested JSON schema). Its own class so that it is never
    confused with a ``ValueError`` raised by client-side validation, and recorded as its own kind."""

    kind = "malformed"
