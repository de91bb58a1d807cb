"""The lifecycle that :class:`~unirag.Captioner` and :class:`~unirag.ImageGenerator` share.

Both wrap a generator backend given either as a spec (loaded on first use, released by
:meth:`LazyBackend.close`) or as a live object the caller owns (never closed here). Keeping this in
one place means the two public classes cannot drift apart in when they load or release models.
"""

from __future__ import annotations

from typing import Any


class LazyBackend:
    """A backend loaded from ``self.spec`` on first use (``_load_backend``) unless one was given.

    Subclasses set ``spec``, ``_backend`` and ``_owned`` (False for a caller's object) in
    ``__init__`` and implement ``_load_backend``.
    """

    spec: str
    _backend: Any = None
    _owned: bool = True

    def _load_backend(self) -> Any:
        raise NotImplementedError

    @property
    def backend(self) -> Any:
        """The backend object (loaded from the spec on first use)."""
        if self._backend is None:
            self._backend = self._load_backend()
        return self._backend

    def warm_up(self):
        """Load the backend now rather than at the first call (Haystack's ``warm_up``)."""
        _ = self.backend
        return self

    def close(self) -> None:
        """Release the backend if this object loaded it (GPU memory included); a caller's object stays."""
        if self._backend is not None and self._owned:
            self._backend.close()
            self._backend = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
