"""Keep secrets out of responses and logs.

Error messages from generator backends may quote what a server sent back, and a misbehaving server
may echo request headers. Every message the service returns or logs goes through :func:`redact`,
which masks the values of secret-looking environment variables (API keys, tokens, passwords) and
the service's own bearer token.
"""

from __future__ import annotations

import logging
import os
import re

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
MASK = "***"


def secret_values(extra: tuple[str, ...] = ()) -> list[str]:
    values = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v.strip()) >= 6}
    values.update(v for v in extra if v and len(v) >= 6)
    return sorted(values, key=len, reverse=True)  # longest first: a key containing another is fully masked


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    for value in secret_values(extra):
        text = text.replace(value, MASK)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in the fully formatted message."""

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.extra = extra

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message, self.extra)
        if clean != message:
            record.msg, record.args = clean, None
        return True
