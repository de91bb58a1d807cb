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
from collections.abc import Callable
from typing import Any

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

    def _http_options(self, **extra: Any) -> Any:
        from google.genai import types

        return types.HttpOptions(timeout=int(self.timeout * 1000), base_url=self.base_url,
                                 retry_options=types.HttpRetryOptions(attempts=1), **extra)

    def _build(self):
        from google import genai

        return genai.Client(api_key=self._key, http_options=self._http_options())

    def request_body(self, call: Callable[[Any], Any]) -> dict[str, Any]:
        """The JSON body the SDK POSTs for ``call(client)``, serialised by the SDK itself into a transport
        that records the request and sends nothing. That client holds a placeholder key, not the user's:
        what it records cannot carry a secret."""
        import json

        import httpx
        from google import genai

        seen: list[httpx.Request] = []

        class _Recorded(Exception):
            pass

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            raise _Recorded

        with httpx.Client(transport=httpx.MockTransport(record)) as http:
            client = genai.Client(api_key="placeholder-not-sent", http_options=self._http_options(httpx_client=http))
            try:
                call(client)
            except _Recorded:
                pass
        if not seen:
            raise RuntimeError("the Gemini SDK sent no request")
        return json.loads(seen[0].content)
