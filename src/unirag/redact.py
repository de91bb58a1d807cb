"""Keep secrets out of files, responses and logs: the one masking function of unirag.

A provider's error may echo the API key it was sent, so every record a run stores, every file written
through :mod:`unirag.runs.atomic`, every message the service returns or logs and the CLI's error line
go through :func:`redact` (:func:`redact_json` for a JSON value): it masks the values of secret-looking
environment variables, the service's bearer token, ``Bearer <value>`` credentials and secret-looking
query parameters. :func:`install_log_redaction` wraps the logging record factory, so no handler
configured later (uvicorn configures its own) can bypass it.
"""

from __future__ import annotations

import logging
import os
import re
from functools import lru_cache
from typing import Any

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
MASK = "***"


@lru_cache(maxsize=1024)
def _secret_name(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


def secret_values(extra: tuple[str, ...] = ()) -> list[str]:
    """The values to mask: the environment's secret-looking variables (read at each call: keys set later
    count) and ``extra``, longest first."""
    env = os.environ
    values = {v for v in (env.get(k, "") for k in env if _secret_name(k)) if len(v.strip()) >= 6}
    values.update(v for v in extra if v and len(v) >= 6)
    return sorted(values, key=len, reverse=True)  # longest first: a key containing another is fully masked


#: ``name=value`` in a URL query string (or a form body) where the name says it is a credential.
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:access[_-]?token|id[_-]?token|refresh[_-]?token|token|api[_-]?key|apikey|key|"
    r"secret|client[_-]?secret|password|passwd|pwd|auth|authorization|signature)=)[^&;#\s\"']+")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{16,}")


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """``text`` with secret values from the environment (and ``extra``), ``?key=`` query values and
    ``Bearer`` credentials replaced by :data:`MASK`."""
    return _mask(text, secret_values(extra))


def _mask(text: str, secrets: list[str]) -> str:
    for value in secrets:
        text = text.replace(value, MASK)
    if "=" in text:  # (cheap tests first: most strings hold neither a query string nor a credential)
        text = _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)
    if "bearer" in text.lower():
        text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    return text


def redact_json(obj: Any, secrets: list[str] | None = None) -> Any:
    """``obj`` (a JSON value) with every string masked by :func:`redact`: the values rather than the text,
    so the JSON stays valid; dict keys are field names, kept. ``secrets``: :func:`secret_values` computed
    once by a caller masking many objects."""
    if secrets is None:
        secrets = secret_values()

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _mask(value, secrets)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk(obj)


_installed: dict[str, Any] = {}


def install_log_redaction(extra: tuple[str, ...] = ()) -> None:
    """Mask secrets in every log record this process creates from now on, on any logger; calling it again
    replaces the extra secrets (the record factory is wrapped once)."""
    _installed["extra"] = tuple(extra)
    if "factory" in _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        # Mask secrets in the record's message and in each argument (one by one: uvicorn's access log
        # unpacks record.args itself); a non-string argument becomes its masked text only when that held
        # a secret, so %d still works.
        record, extra = previous(*args, **kwargs), _installed["extra"]

        def arg(value: object) -> object:
            if isinstance(value, int | float | bool) or value is None:
                return value
            text = value if isinstance(value, str) else str(value)
            clean = redact(text, extra)
            return clean if clean != text or isinstance(value, str) else value

        if isinstance(record.args, tuple):
            record.args = tuple(arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: arg(v) for k, v in record.args.items()}
        message = record.msg if isinstance(record.msg, str) else record.getMessage()
        clean = redact(message, extra)
        if isinstance(record.msg, str):
            record.msg = clean
        elif clean != message:
            record.msg, record.args = clean, None
        return record

    _installed["factory"] = factory
    logging.setLogRecordFactory(factory)
