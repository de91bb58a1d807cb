"""Exceptions that tell the user what to fix.

Every error raised for bad input names the place where the problem is (file, line, field) so that a
user can open the file and fix it without reading a traceback.
"""

from __future__ import annotations

import errno as errno_names
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


def existing_path(path: str | Path, what: str = "file", folder: bool = False) -> Path:
    """``path`` as a Path, or the :class:`InputError` "<what> not found" naming it (missing, or not a file;
    with ``folder``, not a folder)."""
    path = Path(path)
    if not (path.is_dir() if folder else path.is_file()):
        raise InputError(f"{what} not found", path=path)
    return path


class ConfigError(UniragError):
    """A wrong option: unknown model id, incompatible index/encoder, missing weights."""


class RunFailedError(UniragError):
    """A run in which every item it tried failed (a wrong key, an unreachable server). The failures are
    recorded in the run folder and retried by a rerun; the CLI exits 1 rather than 2 (not bad input)."""

    exit_code = 1


class SkippedInputsWarning(UserWarning):
    """Some inputs (missing or unreadable images) were skipped and the rest was processed; the
    warning names how many and the first ones. The CLI lists them itself and silences this one."""


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


def os_error_line(exc: BaseException) -> str | None:
    """``cannot write PATH: No space left on device (errno 28, ENOSPC)`` for the operating-system error behind
    ``exc`` (itself, or one it was raised from or while handling), None when there is none: the CLI ends a
    command that hit a full disk, a read-only folder or a missing permission with it, not a traceback."""
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and not (isinstance(err, OSError) and err.errno is not None):
        seen.add(id(err))
        err = err.__cause__ or err.__context__
        err = None if err is not None and id(err) in seen else err
    if err is None:
        return None
    name = errno_names.errorcode.get(err.errno or 0, "?")
    where = f" {err.filename}" if err.filename else ""
    if getattr(err, "filename2", None):
        where += f" -> {err.filename2}"
    action = "write" if err.errno in _WRITE_ERRNOS else "access"
    reason = err.strerror or str(err)
    return f"cannot {action}{where}: {reason} (errno {err.errno}, {name})"


#: errnos that mean "could not write": full disk, quota, read-only file system, file too large.
_WRITE_ERRNOS = {28, 122, 30, 27}
