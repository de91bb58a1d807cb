"""Retry policy for calls to models and APIs: exponential backoff with full jitter, Retry-After.

Transient failures (429, 5xx, timeouts, connection resets) are retried; permanent ones (400, auth)
fail the item at once. Backends translate their SDK's exceptions into :class:`BackendError` with
``retryable`` and ``retry_after`` set; this module only decides when to try again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from unirag.errors import BackendError

T = TypeVar("T")

def is_retryable_status(status: int | None) -> bool:
    """Only timeouts, 429 and 5xx: any other status (400, 401, 404, 409, ...) fails the item at once."""
    # 408: the server timed out waiting for the request; 429: rate limit
    return status is not None and (status in (408, 429) or 500 <= status <= 599)


@dataclass
class RetryPolicy:
    max_attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 120.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 1)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after)
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(0, cap)


def call_with_retry(fn: Callable[[], T], policy: RetryPolicy | None = None,
                    sleep: Callable[[float], None] = time.sleep) -> tuple[T, int]:
    """Call ``fn`` until it succeeds or fails permanently. Returns (result, attempts used).

    Raises the last :class:`BackendError` when attempts run out or the error is not retryable.
    """
    policy = policy or RetryPolicy()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn(), attempt
        except BackendError as err:
            if not err.retryable or attempt >= policy.max_attempts:
                raise
            sleep(policy.delay(attempt, err.retry_after))
