"""Google Gemini through ``google-genai``: captions (``gemini:``) and native images (``gemini-image:``).

Captions (paper: Gemini-Pro via Vertex AI generate-content): the typed messages become ``contents``
(text parts and inline image bytes, in order) and a system turn becomes ``system_instruction``.

Images: the request is the paper's Gemini-style interleaved content (``image_fewshot_gemini.txt``):
the instruction first, then image_1, caption_1, ..., image_k, caption_k, then the query caption;
zero-shot sends the caption alone. The picture comes back as an ``inline_data`` part.

Both kinds share :class:`GeminiAPI`: the API key comes from the environment only (never an option,
never logged): the named variable, else the first of ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY`` that is
set (the two names the SDK itself reads); the SDK's own retries are off: the shared retry loop decides.
"""

from __future__ import annotations

import json
import os
from typing import Any

from unirag.data.images import load_rgb
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.api import APIBackend, malformed_response, status_error, transient_error
from unirag.generators.base import Generation, GenerationOptions, TextGenerator, Usage, body_for_log
from unirag.generators.images.base import (
    FEW_SHOT_GEMINI,
    ZERO_SHOT,
    GeneratedImage,
    ImageBackend,
    ImageRequest,
    image_template,
)
from unirag.messages import ImagePart, Message, TextPart, render_for_log

PROVIDER = "Gemini"
IMAGES_PROVIDER = "Gemini image"
#: Tokens Gemini counts per input image (1.5 models); used to split the prompt total for pricing.
IMAGE_TOKENS = 258
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
# Aspect ratios Gemini image models accept; the request's width/height picks the nearest.
ASPECT_RATIOS = ("1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9")


class GeminiAPI(APIBackend):
    """Key, base URL and a thread-safe, lazily created ``genai.Client`` shared by worker threads.

    ``api_key_env`` records which variable supplied the key (the run config names it, never the
    key). The SDK is imported on first use, not here: it takes seconds and the CLI's ``--help``
    must stay fast.
    """

    provider = PROVIDER

    def _credentials(self, api_key_env: str | None) -> str:
        names = (api_key_env,) if api_key_env else KEY_VARIABLES
        self.api_key_env = next((n for n in names if os.environ.get(n)), names[0])
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(f"set the {' or '.join(names)} environment variable (the Gemini API key)")
        return key

    def _http_options(self, **extra: Any) -> Any:
        from google.genai import types

        return types.HttpOptions(timeout=int(self.timeout * 1000), base_url=self.base_url,
                                 retry_options=types.HttpRetryOptions(attempts=1), **extra)

    def _build(self):
        from google import genai

        return genai.Client(api_key=self._key, http_options=self._http_options())

    def _map_error(self, e: Exception) -> BackendError | None:
        """SDK / transport exceptions -> BackendError (status decides retryable; Retry-After honoured)."""
        import httpx
        from google.genai import errors

        if isinstance(e, errors.APIError):
            headers = getattr(getattr(e, "response", None), "headers", None)
            return status_error(self.provider, e.code, e.message or str(e), headers)
        name = type(e).__name__
        if isinstance(e, httpx.TimeoutException | TimeoutError):
            return transient_error(self.provider, f"request timed out ({name})")
        if isinstance(e, httpx.TransportError | ConnectionError):
            return transient_error(self.provider, "connection failed", f"{name}: {e}")
        if isinstance(e, json.JSONDecodeError):
            return malformed_response(self.provider, "malformed response body", f"{name}: {e}")
        return None

    def _send(self, client: Any, messages: list[Message], config: dict[str, Any]) -> Any:
        """The one ``generate_content`` call of both kinds (also what :meth:`GeminiGenerator.sent_prompt` records): the
        typed messages as ``types.Content`` (images inline as bytes with their MIME type; the order of
        parts kept exactly), a system turn as the ``system_instruction``."""
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
        if system:
            config = {**config, "system_instruction": "\n".join(system)}
        return client.models.generate_content(model=self.model, contents=contents, config=config)


def first_candidate(resp: Any, provider: str) -> tuple[list[Any], list[str], Any]:
    """The first candidate's parts, their texts and its finish reason. No candidate at all: refused when
    the prompt was blocked, else a cut-off body (retryable)."""
    candidates = getattr(resp, "candidates", None) or []
    if not candidates:
        reason = getattr(getattr(resp, "prompt_feedback", None), "block_reason", None)
        if reason:
            raise BackendError(f"{provider}: the request was blocked ({reason})", kind="refused")
        raise malformed_response(provider, "malformed response body", "no candidates")
    parts = getattr(getattr(candidates[0], "content", None), "parts", None) or []
    return parts, [p.text for p in parts if getattr(p, "text", None)], getattr(candidates[0], "finish_reason", None)


def token_counts(resp: Any) -> tuple[int, int]:
    """(prompt tokens, answer tokens) as the response's ``usage_metadata`` reports them."""
    meta = getattr(resp, "usage_metadata", None)
    return int(getattr(meta, "prompt_token_count", 0) or 0), int(getattr(meta, "candidates_token_count", 0) or 0)


class GeminiGenerator(GeminiAPI, TextGenerator):
    backend = "gemini"

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str | None = None,
                 timeout: float = 120.0, family: str = "gemini", spec: str | None = None) -> None:
        self.template_family = family
        self.image_mode = "single-image" if family == "llava" else "multi-image"
        super().__init__(model, spec=spec, base_url=base_url, api_key_env=api_key_env, timeout=timeout)

    def request_config(self, options: GenerationOptions) -> dict[str, Any]:
        config: dict[str, Any] = {"max_output_tokens": options.max_tokens, **options.given("temperature", "seed")}
        if options.json_schema is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = options.json_schema
        return config

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str:
        """The JSON body exactly as the SDK sends it (``contents``, ``systemInstruction``,
        ``generationConfig``), each image's base64 data shortened to its size and hash: serialised by the
        SDK itself into a transport that records the request, sends nothing and answers an empty body. The
        key travels in a header, never in the body, and the recording client holds a placeholder key, not
        the user's: what it records cannot carry a secret."""
        import httpx
        from google import genai

        options = options or GenerationOptions()
        seen: list[httpx.Request] = []
        with httpx.Client(transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(200, json={}))) as http:
            client = genai.Client(api_key="placeholder-not-sent", http_options=self._http_options(httpx_client=http))
            self._send(client, messages, self.request_config(options))
        if not seen:
            raise RuntimeError("the Gemini SDK sent no request")
        return body_for_log(json.loads(seen[0].content))

    def generate(self, messages: list[Message], options: GenerationOptions | None = None) -> Generation:
        options = options or GenerationOptions()
        resp = self.call(lambda client: self._send(client, messages, self.request_config(options)))
        _, texts, finish = first_candidate(resp, self.provider)
        if not texts:
            if finish is not None and "SAFETY" in str(finish):
                raise BackendError(f"{PROVIDER}: the answer was blocked ({finish})", kind="refused")
            raise malformed_response(PROVIDER, "malformed response body", f"candidate has no text (finish {finish})")
        prompt, output = token_counts(resp)
        n_images = sum(len(m.images) for m in messages)
        image_tokens = min(prompt, IMAGE_TOKENS * n_images) if prompt else 0
        usage = Usage(input_tokens=prompt, input_text_tokens=max(0, prompt - image_tokens), input_images=n_images,
                      output_tokens=output)
        return Generation(text="".join(texts), usage=usage, raw={"finish_reason": str(finish) if finish else None})

    def config(self) -> dict[str, Any]:
        return {**super().config(), "template_family": self.template_family, "image_mode": self.image_mode}


def nearest_aspect_ratio(width: int, height: int) -> str:
    target = width / height
    return min(ASPECT_RATIOS, key=lambda r: abs(int(r.split(":")[0]) / int(r.split(":")[1]) - target))


def image_prompt_messages(request: ImageRequest) -> list[Message]:
    """The request as one typed user message: [instruction, image_1, caption_1, ..., query caption]."""
    if not request.examples:
        return [Message("user", [TextPart(image_template(ZERO_SHOT).fill("prompt", caption=request.caption))])]
    tpl = image_template(FEW_SHOT_GEMINI)
    parts: list[Any] = [TextPart(tpl.fill("intro", num=len(request.examples)))]
    for i, ex in enumerate(request.examples, start=1):
        parts.append(ImagePart(path=ex.image, label=ex.label or f"example {i}", loading=request.loading))
        parts.append(TextPart(tpl.fill("example", n=i, caption=ex.caption)))
    parts.append(TextPart(tpl.fill("query", caption=request.caption)))
    return [Message("user", parts)]


def parse_image_response(resp: Any) -> tuple[Any, dict[str, Any]]:
    """The first image part of a response as an RGB PIL image, plus the text parts and finish reason.

    No image (a refusal, a safety block, a text-only answer) is a permanent BackendError that
    quotes what came back instead.
    """
    parts, texts, finish = first_candidate(resp, IMAGES_PROVIDER)
    finish = getattr(finish, "value", finish)
    for p in parts:
        blob = getattr(p, "inline_data", None)
        if blob is not None and str(getattr(blob, "mime_type", "")).startswith("image/") and blob.data:
            try:
                image = load_rgb(bytes(blob.data))
            except InputError as e:
                raise malformed_response(IMAGES_PROVIDER, "response image could not be decoded", str(e)) from None
            return image, {"model_text": " ".join(texts) or None, "finish_reason": finish}
    said = (" ".join(texts))[:300]
    raise BackendError(f"{IMAGES_PROVIDER}: the response has no image (finish reason {finish})"
                       + (f"; the model said: {said!r}" if said else ""))


class GeminiImageGenerator(GeminiAPI, ImageBackend):
    backend = "gemini-image"
    provider = IMAGES_PROVIDER
    templates = (ZERO_SHOT, FEW_SHOT_GEMINI)

    def prompt_text(self, request: ImageRequest) -> str:
        return render_for_log(image_prompt_messages(request))

    def generate(self, request: ImageRequest) -> GeneratedImage:
        ratio = nearest_aspect_ratio(request.width, request.height)
        config = {"response_modalities": ["TEXT", "IMAGE"], "seed": int(request.seed),
                  **({"image_config": {"aspect_ratio": ratio}} if ratio != "1:1" else {})}
        resp = self.call(lambda client: self._send(client, image_prompt_messages(request), config))
        image, extra = parse_image_response(resp)
        prompt, output = token_counts(resp)
        usage = None if getattr(resp, "usage_metadata", None) is None else Usage(
            input_tokens=prompt, input_images=len(request.examples), output_tokens=output)
        return GeneratedImage(image=image, meta={"prompt": self.prompt_text(request), **extra}, usage=usage)
