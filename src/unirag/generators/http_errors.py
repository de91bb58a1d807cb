"""Turn an HTTP failure from any provider SDK into one :class:`BackendError`.

Every API backend (OpenAI, Gemini, image APIs) funnels its SDK exceptions through here, so the
decision "retry or not, and after how long" is made in one place: the status code decides
``retryable`` (see :func:`unirag.runs.retry.is_retryable_status`) and a ``Retry-After`` header
(seconds or an HTTP date) or ``retry-after-ms`` sets the wait.
"""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import Iterator, Mapping

from unirag.errors import BackendError, MalformedResponseError
from unirag.runs.retry import is_retryable_status

_MAX_MESSAGE = 500


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait as the server asked, or None. Accepts ``retry-after-ms`` and ``Retry-After``."""
    if not headers:
        return None
    lower = {str(k).lower(): v for k, v in dict(headers).items()}
    ms = lower.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    value = str(value).strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


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


@contextlib.contextmanager
def openai_errors(provider: str, timeout: float) -> Iterator[None]:
    """Translate the openai SDK's exceptions raised inside the block into BackendError.

    Shared by the chat backend (``openai_compat``) and the images backend (``openai_images``) so
    both classify status codes, timeouts, dropped connections and unparsable bodies identically.
    Anything else (a ``TypeError`` in our code, a ``ValueError`` from the SDK's client-side
    validation of a request) is not a failed call but a bug or a wrong option: it propagates.
    ``openai`` is imported here, not at module top, to keep ``unirag --help`` fast.
    """
    import json

    import openai

    try:
        yield
    except openai.APIStatusError as e:
        raise status_error(provider, e.status_code, e.message, e.response.headers) from None
    except openai.APITimeoutError:
        raise transient_error(provider, f"request timed out after {timeout:g}s") from None
    except openai.APIConnectionError as e:
        raise transient_error(provider, "connection failed", str(e.__cause__ or e)) from None
    except (openai.APIResponseValidationError, json.JSONDecodeError) as e:
        raise malformed_response(provider, "malformed response body", str(e)) from None
