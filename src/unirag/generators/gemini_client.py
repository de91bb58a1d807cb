"""The ``google-genai`` client shared by the Gemini backends (chat captions and native images).

Both backends find the API key and build their one lazily created client the same way, so that
logic lives here once (the OpenAI counterpart is :mod:`unirag.generators.openai_client`):

- API key: from the environment only (never an option, never logged): the named variable, else
  the first of ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY`` that is set - the two names the SDK
  itself reads;
- ``base_url`` points the client elsewhere (a proxy, or a test server on 127.0.0.1);
- the SDK's own retries are off (one attempt): the shared retry loop decides.
"""

from __future__ import annotations

import os

from unirag.errors import ConfigError
from unirag.generators.lazy_client import LazyClient

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


class GeminiConnection(LazyClient):
    """Key, base URL and a thread-safe, lazily created ``genai.Client`` shared by worker threads.

    ``api_key_env`` records which variable supplied the key (the run config names it, never the
    key). The SDK is imported on first use, not here: it takes seconds and the CLI's ``--help``
    must stay fast.
    """

    def __init__(self, *, base_url: str | None, api_key_env: str | None, timeout: float) -> None:
        super().__init__()
        self.base_url = base_url
        self.timeout = timeout
        names = (api_key_env,) if api_key_env else KEY_VARIABLES
        self.api_key_env = next((n for n in names if os.environ.get(n)), names[0])
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(f"set the {' or '.join(names)} environment variable (the Gemini API key)")
        self._key = key

    def _build(self):
        from google import genai
        from google.genai import types

        http = types.HttpOptions(timeout=int(self.timeout * 1000), base_url=self.base_url,
                                 retry_options=types.HttpRetryOptions(attempts=1))
        return genai.Client(api_key=self._key, http_options=http)
