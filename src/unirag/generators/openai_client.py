"""The openai SDK client shared by the OpenAI backends (chat captions and images).

Both backends resolve the base URL and API key the same way and keep one lazily built client that
their worker threads share, so that logic lives here once:

- base URL: the option, else ``OPENAI_BASE_URL``, else the SDK's default (api.openai.com);
- API key: from the environment variable only (never an option, never logged). A local
  OpenAI-compatible server (any non-OpenAI base URL) usually ignores the key, so a placeholder is
  used there instead of demanding one;
- the SDK's own retries are off (``max_retries=0``): the shared retry loop decides.
"""

from __future__ import annotations

import os

from unirag.errors import ConfigError
from unirag.generators.lazy_client import LazyClient

OFFICIAL_HOST = "api.openai.com"
LOCAL_DUMMY_KEY = "unused-local-server"


class OpenAIConnection(LazyClient):
    """Base URL, key and a thread-safe, lazily created ``openai.OpenAI`` client.

    ``server`` names what ``--base-url`` should point at, for the missing-key message
    (e.g. "server", "images server"). The SDK is imported on first use, not here: it takes seconds.
    """

    def __init__(self, *, base_url: str | None, api_key_env: str, timeout: float, server: str = "server") -> None:
        super().__init__()
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.timeout = timeout
        key = os.environ.get(api_key_env)
        if not key:
            if self.base_url and OFFICIAL_HOST not in self.base_url:
                key = LOCAL_DUMMY_KEY  # local servers usually ignore the key
            else:
                raise ConfigError(f"set the {api_key_env} environment variable (the OpenAI API key), "
                                  f"or give --base-url for a local OpenAI-compatible {server}")
        self._key = key

    def _build(self):
        from openai import OpenAI

        return OpenAI(api_key=self._key, base_url=self.base_url, max_retries=0, timeout=self.timeout)

    def _release(self, client) -> None:
        client.close()
