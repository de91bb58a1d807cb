"""OpenAI-compatible chat completions: GPT-4o, and local servers (vLLM, Ollama, LM Studio, llama.cpp).

One backend for every server that speaks ``/v1/chat/completions``: the base URL and model name
are options, so ``openai:gpt-4o`` and ``openai:llava-hf/llava-1.5-7b-hf --base-url
http://localhost:8000/v1`` differ only in configuration. The SDK's own retries are switched off
(``max_retries=0``): the shared retry loop (:mod:`unirag.runs.retry`) decides, honouring
``Retry-After``. The API key comes from the environment only.
"""

from __future__ import annotations

import math
from typing import Any

from unirag.errors import BackendError, ConfigError
from unirag.generators.base import Generation, GenerationOptions, TextGenerator, Usage, base64_placeholder
from unirag.generators.http_errors import malformed_response, openai_errors
from unirag.generators.openai_client import OpenAIConnection
from unirag.messages import ImagePart, Message, TextPart

PROVIDER = "OpenAI-compatible"


def render_openai_messages(messages: list[Message], detail: str | None = None) -> list[dict[str, Any]]:
    """Typed messages -> chat-completions ``messages``: text-only turns as strings, others as parts."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if not m.images:
            out.append({"role": m.role, "content": m.text})
            continue
        content: list[dict[str, Any]] = []
        for p in m.parts:
            if isinstance(p, TextPart):
                content.append({"type": "text", "text": p.text})
            else:
                url: dict[str, Any] = {"url": p.data_url()}
                if detail:
                    url["detail"] = detail
                content.append({"type": "image_url", "image_url": url})
        out.append({"role": m.role, "content": content})
    return out


def _image_size(part: ImagePart) -> tuple[int, int]:
    from unirag.data.images import upright_size

    return upright_size(part.path if part.path is not None else part.data)


def openai_image_tokens(width: int, height: int, detail: str | None = None) -> int:
    """Tokens GPT-4o bills for one image (OpenAI's published tile formula).

    ``low``: 85. ``high``/``auto``: fit within 2048x2048, scale the shortest side to 768, then
    85 + 170 per 512-pixel tile. Used to split the reported prompt total into text and image tokens.
    """
    if detail == "low":
        return 85
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


class OpenAIChatGenerator(TextGenerator):
    """Chat completions through the official ``openai`` SDK (thread-safe: one client, many calls)."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 120.0, family: str = "gpt4o", detail: str | None = None,
                 spec: str | None = None) -> None:
        if not model:
            raise ConfigError("openai spec needs a model name, e.g. 'openai:gpt-4o'")
        self.model = model
        self.spec = spec or f"openai:{model}"
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.detail = detail
        self.template_family = family
        self.image_mode = "single-image" if family == "llava" else "multi-image"
        self._conn = OpenAIConnection(base_url=base_url, api_key_env=api_key_env, timeout=self.timeout)
        self.base_url = self._conn.base_url

    def request_body(self, messages: list[Message], options: GenerationOptions) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` (also what the tests compare)."""
        body: dict[str, Any] = {"model": self.model, "messages": render_openai_messages(messages, self.detail),
                                "max_tokens": options.max_tokens}
        if options.temperature is not None:  # None: send none (the provider's default), as the official code
            body["temperature"] = options.temperature
        if options.seed is not None:
            body["seed"] = options.seed
        if options.json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": options.json_schema}}
        if options.repetition_penalty is not None:  # vLLM's sampling extension, sent in the request body
            body["extra_body"] = {"repetition_penalty": options.repetition_penalty}
        return body

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str:
        """The request body exactly as sent (JSON), each image's base64 data shortened to its size and hash."""
        import json
        import re

        def short(m: re.Match) -> str:
            return m.group(1) + base64_placeholder(m.group(2))

        text = json.dumps(self.request_body(messages, options or GenerationOptions()), indent=2, ensure_ascii=False)
        return re.sub(r"(data:[^;\"]+;base64,)([A-Za-z0-9+/=]+)", short, text)

    def generate(self, messages: list[Message], options: GenerationOptions | None = None) -> Generation:
        options = options or GenerationOptions()
        body = self.request_body(messages, options)
        client = self._conn.client()
        with openai_errors(PROVIDER, self.timeout):
            resp = client.chat.completions.create(**body)
        return self._parse(resp, messages)

    def _parse(self, resp: Any, messages: list[Message]) -> Generation:
        choices = getattr(resp, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise malformed_response(PROVIDER, "malformed response body", "no choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None)
        finish = getattr(choice, "finish_reason", None)
        if text is None:
            if finish == "content_filter":
                raise BackendError(f"{PROVIDER}: the provider refused the request (content filter)", kind="refused")
            raise malformed_response(PROVIDER, "malformed response body", "choice has no message content")
        if not isinstance(text, str):
            raise malformed_response(PROVIDER, "malformed response body", "content is not a string")
        usage = self._usage(getattr(resp, "usage", None), messages)
        return Generation(text=text, usage=usage, raw={"finish_reason": finish, "model": getattr(resp, "model", None)})

    def _usage(self, reported: Any, messages: list[Message]) -> Usage:
        images = [p for m in messages for p in m.images]
        prompt = int(getattr(reported, "prompt_tokens", 0) or 0)
        output = int(getattr(reported, "completion_tokens", 0) or 0)
        image_tokens = sum(openai_image_tokens(*_image_size(p), self.detail) for p in images)
        image_tokens = min(image_tokens, prompt) if prompt else image_tokens
        return Usage(input_tokens=prompt, input_text_tokens=max(0, prompt - image_tokens), input_images=len(images),
                     input_image_tokens=image_tokens, output_tokens=output)

    def config(self) -> dict[str, Any]:
        # No key here: manifests must never hold secrets (only the variable's name).
        return {"spec": self.spec, "backend": "openai", "model": self.model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "timeout": self.timeout, "detail": self.detail,
                "template_family": self.template_family, "image_mode": self.image_mode}

    def close(self) -> None:
        self._conn.close()
