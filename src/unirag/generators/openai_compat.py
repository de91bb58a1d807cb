"""The OpenAI API and every server that speaks it: chat captions (``openai:``) and images (``openai-image:``).

Chat completions serve GPT-4o and local servers (vLLM, Ollama, LM Studio, llama.cpp) alike: the base
URL and model name are options, so ``openai:gpt-4o`` and ``openai:llava-hf/llava-1.5-7b-hf --base-url
http://localhost:8000/v1`` differ only in configuration.

Images (gpt-image-1, dall-e-3): zero-shot goes to ``images.generate``; few-shot to ``images.edit``, the
endpoint that takes reference images, with the prompt (``image_fewshot_api.txt``) numbering them with
their captions before asking for the query caption.

Both kinds share :class:`OpenAIAPI`: the base URL is the option, else ``OPENAI_BASE_URL``, else the
SDK's default; the API key comes from the environment only (never an option, never logged), and a
local OpenAI-compatible server (any non-OpenAI base URL), which usually ignores it, gets a placeholder;
the SDK's own retries are off: the shared retry loop (:mod:`unirag.runs.retry`) decides.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
from typing import Any

from unirag.data.images import load_rgb, upright_size
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.api import APIBackend, malformed_response, status_error, transient_error
from unirag.generators.base import Generation, GenerationOptions, TextGenerator, Usage, body_for_log
from unirag.generators.images.base import (
    FEW_SHOT_API,
    ZERO_SHOT,
    GeneratedImage,
    ImageBackend,
    ImageRequest,
    render_listed,
)
from unirag.messages import ImagePart, Message, TextPart

PROVIDER = "OpenAI-compatible"
IMAGES_PROVIDER = "OpenAI images"
OFFICIAL_HOST = "api.openai.com"
LOCAL_DUMMY_KEY = "unused-local-server"


class OpenAIAPI(APIBackend):
    """Base URL, key and a lazily created ``openai.OpenAI`` client, the same for both kinds.

    ``server`` names what ``--base-url`` should point at, for the missing-key message. The SDK is
    imported on first use, not here: it takes seconds.
    """

    provider = PROVIDER
    server = "server"

    def _credentials(self, api_key_env: str | None) -> str:
        """Also the base URL's default, ``OPENAI_BASE_URL``: a local server's URL makes the key optional."""
        self.base_url = self.base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.api_key_env = api_key_env
        key = os.environ.get(api_key_env or "")
        if not key:
            if self.base_url and OFFICIAL_HOST not in self.base_url:
                key = LOCAL_DUMMY_KEY  # local servers usually ignore the key
            else:
                raise ConfigError(f"set the {api_key_env} environment variable (the OpenAI API key), "
                                  f"or give --base-url for a local OpenAI-compatible {self.server}")
        return key

    def _build(self):
        from openai import OpenAI

        return OpenAI(api_key=self._key, base_url=self.base_url, max_retries=0, timeout=self.timeout)

    def _map_error(self, e: Exception) -> BackendError | None:
        """Status codes, timeouts, dropped connections and unparsable bodies, the same for both kinds.
        ``openai`` is imported here, not at module top, to keep ``unirag --help`` fast."""
        import openai

        if isinstance(e, openai.APIStatusError):
            return status_error(self.provider, e.status_code, e.message, e.response.headers)
        if isinstance(e, openai.APITimeoutError):
            return transient_error(self.provider, f"request timed out after {self.timeout:g}s")
        if isinstance(e, openai.APIConnectionError):
            return transient_error(self.provider, "connection failed", str(e.__cause__ or e))
        if isinstance(e, openai.APIResponseValidationError | json.JSONDecodeError):
            return malformed_response(self.provider, "malformed response body", str(e))
        return None


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


class OpenAIChatGenerator(OpenAIAPI, TextGenerator):
    """Chat completions through the official ``openai`` SDK (thread-safe: one client, many calls)."""

    backend = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 120.0, family: str = "gpt4o", detail: str | None = None,
                 spec: str | None = None) -> None:
        self.detail = detail
        self.template_family = family
        self.image_mode = "single-image" if family == "llava" else "multi-image"
        super().__init__(model, spec=spec, base_url=base_url, api_key_env=api_key_env, timeout=timeout)

    def request_body(self, messages: list[Message], options: GenerationOptions) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` (also what the tests compare)."""
        detail = {"detail": self.detail} if self.detail else {}
        rendered = [{"role": m.role, "content": m.text if not m.images else [  # text-only turns as strings
            {"type": "text", "text": p.text} if isinstance(p, TextPart) else
            {"type": "image_url", "image_url": {"url": p.data_url(), **detail}} for p in m.parts]}
            for m in messages]
        body: dict[str, Any] = {"model": self.model, "messages": rendered, "max_tokens": options.max_tokens,
                                **options.given("temperature", "seed")}
        if options.json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": options.json_schema}}
        if options.repetition_penalty is not None:  # vLLM's sampling extension, sent in the request body
            body["extra_body"] = {"repetition_penalty": options.repetition_penalty}
        return body

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str:
        """The request body exactly as sent (JSON), each image's base64 data shortened to its size and hash."""
        return body_for_log(self.request_body(messages, options or GenerationOptions()))

    def generate(self, messages: list[Message], options: GenerationOptions | None = None) -> Generation:
        options = options or GenerationOptions()
        body = self.request_body(messages, options)
        resp = self.call(lambda client: client.chat.completions.create(**body))
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
        reported = getattr(resp, "usage", None)
        images = [upright_size(p.path if p.path is not None else p.data) for m in messages for p in m.images]
        prompt = int(getattr(reported, "prompt_tokens", 0) or 0)
        output = int(getattr(reported, "completion_tokens", 0) or 0)
        image_tokens = sum(openai_image_tokens(w, h, self.detail) for w, h in images)
        image_tokens = min(image_tokens, prompt) if prompt else image_tokens
        usage = Usage(input_tokens=prompt, input_text_tokens=max(0, prompt - image_tokens), input_images=len(images),
                      input_image_tokens=image_tokens, output_tokens=output)
        return Generation(text=text, usage=usage, raw={"finish_reason": finish, "model": getattr(resp, "model", None)})

    def config(self) -> dict[str, Any]:
        return {**super().config(), "detail": self.detail, "template_family": self.template_family,
                "image_mode": self.image_mode}


# Sizes each model accepts (checked before the run, so a bad --width/--height is one clear error
# instead of a 400 per query). Unknown models (compatible servers) are not checked.
_SIZES = {
    "gpt-image": {"1024x1024", "1536x1024", "1024x1536", "auto"},
    "dall-e-3": {"1024x1024", "1792x1024", "1024x1792"},
    "dall-e-2": {"256x256", "512x512", "1024x1024"},
}


class OpenAIImageGenerator(OpenAIAPI, ImageBackend):
    """Thread-safe: one SDK client shared by the run loop's worker threads."""

    backend = "openai-image"
    provider = IMAGES_PROVIDER
    server = "images server"
    templates = (ZERO_SHOT, FEW_SHOT_API)

    def __init__(self, model: str, *, spec: str | None = None, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float = 300.0, quality: str | None = None) -> None:
        self.quality = quality
        self._family = next((f for f in _SIZES if model.startswith(f)), None)
        # dall-e-2 edits take one image; dall-e-3 has no edit endpoint; gpt-image models take up to 16.
        self.max_examples = {"dall-e-3": 0, "dall-e-2": 1, "gpt-image": 16}.get(self._family or "", None)
        super().__init__(model, spec=spec, base_url=base_url, api_key_env=api_key_env, timeout=timeout)

    def check_size(self, width: int, height: int) -> None:
        super().check_size(width, height)
        size = f"{width}x{height}"
        if self._family is not None and size not in _SIZES[self._family]:
            raise ConfigError(f"{self.model} cannot make {size} images; supported sizes: "
                              + ", ".join(sorted(_SIZES[self._family])))

    def prompt_text(self, request: ImageRequest) -> str:
        return render_listed(FEW_SHOT_API, request.caption, [e.caption for e in request.examples])

    def generate(self, request: ImageRequest) -> GeneratedImage:
        args: dict[str, Any] = {"model": self.model, "prompt": self.prompt_text(request), "n": 1,
                                "size": f"{request.width}x{request.height}"}
        if self._family == "gpt-image":
            args["output_format"] = "png"  # lossless; gpt-image models always answer in base64
        else:
            args["response_format"] = "b64_json"
        if self.quality:
            args["quality"] = self.quality
        if request.examples:  # images.edit, the endpoint that takes reference images
            files = []
            for i, ex in enumerate(request.examples, start=1):
                data, mime = ImagePart(path=ex.image, loading=request.loading).encoded()
                ext = {"image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}.get(mime, "png")
                files.append((f"example_{i}.{ext}", data, mime))
            args["image"] = files
        resp = self.call(lambda c: (c.images.edit if request.examples else c.images.generate)(**args))
        data = getattr(resp, "data", None)
        if not data:
            raise malformed_response(IMAGES_PROVIDER, "malformed response body", "no data[] in the response")
        first = data[0]
        if getattr(first, "b64_json", None) is None and getattr(first, "url", None):
            raise BackendError(f"{IMAGES_PROVIDER}: the server returned a URL instead of base64 image data")
        b64 = getattr(first, "b64_json", None)
        if not isinstance(b64, str) or not b64:
            raise malformed_response(IMAGES_PROVIDER, "malformed response body", "no base64 image data")
        try:
            image = load_rgb(base64.b64decode(b64, validate=True))
        except (binascii.Error, InputError) as e:
            raise malformed_response(IMAGES_PROVIDER, "response image could not be decoded", str(e)) from None
        meta: dict[str, Any] = {"prompt": args["prompt"]}
        if getattr(first, "revised_prompt", None):
            meta["revised_prompt"] = first.revised_prompt
        usage = getattr(resp, "usage", None)  # gpt-image models report text and image input separately
        if usage is not None:
            details = getattr(usage, "input_tokens_details", None)
            usage = Usage(input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                          input_text_tokens=int(getattr(details, "text_tokens", 0) or 0),
                          input_image_tokens=int(getattr(details, "image_tokens", 0) or 0),
                          input_images=len(request.examples),
                          output_tokens=int(getattr(usage, "output_tokens", 0) or 0))
        return GeneratedImage(image=image, meta=meta, usage=usage)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "quality": self.quality}

    def identity(self) -> dict[str, Any]:
        return {"quality": self.quality} if self.quality else {}
