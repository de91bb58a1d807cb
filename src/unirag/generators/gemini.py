"""Google Gemini through the ``google-genai`` SDK (paper: Gemini-Pro via Vertex AI generate-content).

The typed messages become ``contents`` (text parts and inline image bytes, in order) and a system
turn becomes ``system_instruction``. The SDK's own retries are disabled; failures are mapped to
:class:`BackendError` by :mod:`unirag.generators.http_errors` like every other API backend. Key
lookup (``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``) and the lazily built client (``base_url`` for a
proxy or the test server) are shared with the image backend in :mod:`unirag.generators.gemini_client`.
"""

from __future__ import annotations

import json
from typing import Any

from unirag.errors import BackendError
from unirag.generators.base import Generation, GenerationOptions, TextGenerator, Usage, base64_placeholder
from unirag.generators.gemini_client import GeminiConnection
from unirag.generators.http_errors import malformed_response, status_error, transient_error
from unirag.messages import Message, TextPart

PROVIDER = "Gemini"
#: Tokens Gemini counts per input image (1.5 models); used to split the prompt total for pricing.
IMAGE_TOKENS = 258


def render_gemini_contents(messages: list[Message]) -> tuple[str | None, list[Any]]:
    """Typed messages -> (system instruction, ``types.Content`` list) for ``generate_content``.

    Images go inline as bytes with their MIME type; the order of parts is kept exactly.
    """
    from google.genai import types

    system: list[str] = []
    contents: list[Any] = []
    for m in messages:
        if m.role == "system":
            system.append(m.text)
            continue
        parts = []
        for p in m.parts:
            if isinstance(p, TextPart):
                parts.append(types.Part.from_text(text=p.text))
            else:
                data, mime = p.encoded()
                parts.append(types.Part.from_bytes(data=data, mime_type=mime))
        contents.append(types.Content(role="model" if m.role == "assistant" else "user", parts=parts))
    return ("\n".join(system) if system else None), contents


class GeminiGenerator(TextGenerator):
    template_family = "gemini"
    image_mode = "multi-image"

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str | None = None,
                 timeout: float = 120.0, family: str = "gemini", spec: str | None = None) -> None:
        self.model = model
        self.spec = spec or f"gemini:{model}"
        self.base_url = base_url
        self.timeout = float(timeout)
        self.template_family = family
        self.image_mode = "single-image" if family == "llava" else "multi-image"
        self._conn = GeminiConnection(base_url=base_url, api_key_env=api_key_env, timeout=self.timeout)
        self.api_key_env = self._conn.api_key_env

    def request_config(self, system: str | None, options: GenerationOptions) -> dict[str, Any]:
        config: dict[str, Any] = {"max_output_tokens": options.max_tokens}
        if options.temperature is not None:  # None: the model's default, as the official code sends
            config["temperature"] = options.temperature
        if system:
            config["system_instruction"] = system
        if options.seed is not None:
            config["seed"] = options.seed
        if options.json_schema is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = options.json_schema
        return config

    def _send(self, client: Any, messages: list[Message], options: GenerationOptions) -> Any:
        """The one ``generate_content`` call (also what :meth:`sent_prompt` records)."""
        system, contents = render_gemini_contents(messages)
        return client.models.generate_content(model=self.model, contents=contents,
                                              config=self.request_config(system, options))

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str:
        """The JSON body exactly as the SDK sends it (``contents``, ``systemInstruction``,
        ``generationConfig``), each image's base64 data shortened to its size and hash; the key travels
        in a header, never in the body, and the recording client holds none."""
        options = options or GenerationOptions()
        body = self._conn.request_body(lambda client: self._send(client, messages, options))
        for content in [*body.get("contents", []), body.get("systemInstruction") or {}]:
            for part in content.get("parts", []):
                inline = part.get("inlineData")
                if isinstance(inline, dict) and isinstance(inline.get("data"), str):
                    inline["data"] = base64_placeholder(inline["data"])
        return json.dumps(body, indent=2, ensure_ascii=False)

    def generate(self, messages: list[Message], options: GenerationOptions | None = None) -> Generation:
        options = options or GenerationOptions()
        client = self._conn.client()
        try:
            resp = self._send(client, messages, options)
        except Exception as e:
            mapped = map_gemini_error(e)
            if mapped is None:
                raise  # a bug or a wrong option, not a failed call: keep the traceback
            raise mapped from None
        return self._parse(resp, messages)

    def _parse(self, resp: Any, messages: list[Message]) -> Generation:
        candidates = getattr(resp, "candidates", None) or []
        if not candidates:
            feedback = getattr(resp, "prompt_feedback", None)
            reason = getattr(feedback, "block_reason", None)
            if reason:
                raise BackendError(f"{PROVIDER}: the request was blocked ({reason})", kind="refused")
            raise malformed_response(PROVIDER, "malformed response body", "no candidates")
        content = getattr(candidates[0], "content", None)
        texts = [p.text for p in (getattr(content, "parts", None) or []) if getattr(p, "text", None)]
        if not texts:
            finish = getattr(candidates[0], "finish_reason", None)
            if finish is not None and "SAFETY" in str(finish):
                raise BackendError(f"{PROVIDER}: the answer was blocked ({finish})", kind="refused")
            raise malformed_response(PROVIDER, "malformed response body", f"candidate has no text (finish {finish})")
        meta = getattr(resp, "usage_metadata", None)
        prompt = int(getattr(meta, "prompt_token_count", 0) or 0)
        output = int(getattr(meta, "candidates_token_count", 0) or 0)
        n_images = sum(len(m.images) for m in messages)
        image_tokens = min(prompt, IMAGE_TOKENS * n_images) if prompt else 0
        usage = Usage(input_tokens=prompt, input_text_tokens=max(0, prompt - image_tokens), input_images=n_images,
                      output_tokens=output)
        finish = getattr(candidates[0], "finish_reason", None)
        return Generation(text="".join(texts), usage=usage, raw={"finish_reason": str(finish) if finish else None})

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "backend": "gemini", "model": self.model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "timeout": self.timeout,
                "template_family": self.template_family, "image_mode": self.image_mode}

    def close(self) -> None:
        self._conn.close()


def map_gemini_error(e: Exception) -> BackendError | None:
    """SDK / transport exceptions -> BackendError (status decides retryable; Retry-After honoured).

    Returns None for anything else (``TypeError``, the SDK's client-side ``ValueError`` checks, ...):
    those are bugs or wrong options, and the caller re-raises them unchanged.
    """
    import httpx
    from google.genai import errors

    if isinstance(e, BackendError):
        return e
    if isinstance(e, errors.APIError):
        headers = getattr(getattr(e, "response", None), "headers", None)
        return status_error(PROVIDER, e.code, e.message or str(e), headers)
    name = type(e).__name__
    if isinstance(e, httpx.TimeoutException | TimeoutError):
        return transient_error(PROVIDER, f"request timed out ({name})")
    if isinstance(e, httpx.TransportError | ConnectionError):
        return transient_error(PROVIDER, "connection failed", f"{name}: {e}")
    if isinstance(e, json.JSONDecodeError):
        return malformed_response(PROVIDER, "malformed response body", f"{name}: {e}")
    return None
