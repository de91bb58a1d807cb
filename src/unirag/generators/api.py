"""What every API backend (OpenAI, Gemini; captions and images) shares: its client and its failures.

- :class:`APIBackend`: the model name, the recorded config and the provider SDK's client, built on
  first use and shared by the run loop's worker threads. SDK imports take seconds (and ``--help`` must
  stay fast), and one client per process is what the SDKs expect, so the client is built lazily under
  a lock; each provider says how (:mod:`~unirag.generators.openai_compat`, :mod:`~unirag.generators.gemini`)
  and how its SDK's exceptions become a :class:`BackendError` (:meth:`APIBackend.call`).
- The decision "retry or not, and after how long" is made here once for every provider: the status
  code decides ``retryable`` (see :func:`unirag.runs.retry.is_retryable_status`) and a ``Retry-After``
  header (seconds or an HTTP date) or ``retry-after-ms`` sets the wait.
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from unirag.errors import BackendError, MalformedResponseError
from unirag.runs.retry import is_retryable_status

_MAX_MESSAGE = 500


class APIBackend:
    """An API model behind a lazily built, thread-shared SDK client (mixed into the caption and image
    backends); each provider's base class sets ``provider`` and ``api_key_env`` and builds the client.

    A provider's base class implements ``_credentials(api_key_env) -> str``: the API key from the
    environment (never an option), recording which variable held it in ``api_key_env``; ConfigError
    naming the variable when none is set. ``_build() -> client``: import the SDK and create the client
    (called once, under the lock). ``_map_error(e) -> BackendError | None``: the SDK's exception as a
    BackendError; None for anything else (a bug or a wrong option).
    """

    #: The spec prefix, recorded as ``backend`` in the config.
    backend = ""
    provider = ""
    api_key_env: str | None = None

    def __init__(self, model: str, *, spec: str | None = None, base_url: str | None = None,
                 api_key_env: str | None = None, timeout: float = 300.0) -> None:
        self.model = model
        self.spec = spec or f"{self.backend}:{model}"
        self.base_url = base_url
        self.timeout = float(timeout)
        self._client: Any = None
        self._lock = threading.Lock()
        self._key = self._credentials(api_key_env)

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._build()
            return self._client

    def call(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(client)``, its SDK failures raised as BackendError. Anything else (a ``TypeError`` in our
        code, the SDK's client-side ``ValueError`` checks) is not a failed call: it propagates unchanged."""
        client = self.client()
        try:
            return fn(client)
        except Exception as e:
            mapped = self._map_error(e)
            if mapped is None:
                raise  # keep the traceback
            raise mapped from None

    def config(self) -> dict[str, Any]:
        # No key here: manifests must never hold secrets (only the variable's name).
        return {"spec": self.spec, "backend": self.backend, "model": self.model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "timeout": self.timeout}

    def close(self) -> None:
        """Close the client (its connection pools) and drop it; the next call builds a fresh one."""
        with self._lock:
            if self._client is not None:
                getattr(self._client, "close", lambda: None)()  # older google-genai clients have none
                self._client = None


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait as the server asked, or None. Accepts ``retry-after-ms`` and ``Retry-After``."""
    lower = {str(k).lower(): str(v).strip() for k, v in dict(headers or {}).items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):  # numbers, milliseconds first
        try:
            return max(0.0, float(lower[name]) / scale)
        except (KeyError, ValueError):
            pass
    try:  # else an HTTP date
        when = email.utils.parsedate_to_datetime(lower.get("retry-after", ""))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when is not None else None


def status_error(provider: str, status: int | None, message: str,
                 headers: Mapping[str, str] | None = None) -> BackendError:
    """A BackendError for an HTTP error status: retryable for 408/409/429/5xx, permanent otherwise."""
    text = " ".join(str(message).split())[:_MAX_MESSAGE]
    hint = ""
    if status in (401, 403):
        hint = " (check the API key environment variable)"
    return BackendError(f"{provider} API error {status}: {text}{hint}", retryable=is_retryable_status(status),
                        retry_after=parse_retry_after(headers), status=status, kind="http")


def transient_error(provider: str, what: str, detail: str = "") -> BackendError:
    """Timeouts and connection resets: worth another try."""
    text = " ".join(str(detail).split())[:_MAX_MESSAGE]
    return BackendError(f"{provider}: {what}" + (f" ({text})" if text else ""), retryable=True, kind="transport")


def malformed_response(provider: str, what: str, detail: str = "") -> MalformedResponseError:
    """A response body that cannot be read as the API's format (cut off or garbled on the way).

    Retryable: the same request usually gets a whole answer the next time. A *model's* reply that
    does not follow the asked format is a non-retryable :class:`MalformedResponseError` raised where
    it is parsed (e.g. the X^R agents, after showing the model its mistake).
    """
    text = " ".join(str(detail).split())[:_MAX_MESSAGE]
    return MalformedResponseError(f"{provider}: {what}" + (f" ({text})" if text else ""), retryable=True)
