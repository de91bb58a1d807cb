"""A provider SDK client built on first use and shared by the run loop's worker threads.

SDK imports take seconds (and ``--help`` must stay fast), and one client per process is what the
SDKs expect, so every API connection builds its client lazily under a lock; subclasses say how.
"""

from __future__ import annotations

import threading
from typing import Any


class LazyClient:
    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    def _build(self) -> Any:
        """Import the SDK and create the client (called once, under the lock)."""
        raise NotImplementedError

    def _release(self, client: Any) -> None:
        """Free the client's resources (connection pools); default: nothing to do."""

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._build()
            return self._client

    def close(self) -> None:
        """Drop the client; the next call builds a fresh one."""
        with self._lock:
            if self._client is not None:
                self._release(self._client)
                self._client = None
