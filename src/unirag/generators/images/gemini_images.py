"""``gemini-image:<model>``: Gemini native image generation through ``google-genai``.

The request is the paper's Gemini-style interleaved content (``image_fewshot_gemini.txt``):
the instruction first, then image_1, caption_1, ..., image_k, caption_k, then the query caption;
zero-shot sends the caption alone. The picture comes back as an ``inline_data`` part of the
response. Content building and response parsing are plain functions so they can be checked
without a network. The key comes from ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``) only. Wire rendering and
error mapping are shared with the caption backend (:mod:`unirag.generators.gemini`), key lookup and
the lazily built client with :mod:`unirag.generators.gemini_client`.
"""

from __future__ import annotations

from typing import Any

from unirag.data.images import load_rgb
from unirag.errors import BackendError, InputError
from unirag.generators.base import Usage
from unirag.generators.gemini import map_gemini_error, render_gemini_contents
from unirag.generators.gemini_client import GeminiConnection
from unirag.generators.http_errors import malformed_response
from unirag.generators.images.base import GeneratedImage, ImageGenerator, ImageRequest
from unirag.generators.images.templates import FEW_SHOT_GEMINI, ZERO_SHOT, image_template, zero_shot_prompt
from unirag.messages import ImagePart, Message, TextPart, render_for_log

PROVIDER = "Gemini image"
# Aspect ratios Gemini image models accept; the request's width/height picks the nearest.
ASPECT_RATIOS = ("1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9")


def nearest_aspect_ratio(width: int, height: int) -> str:
    target = width / height
    return min(ASPECT_RATIOS, key=lambda r: abs(int(r.split(":")[0]) / int(r.split(":")[1]) - target))


def image_prompt_messages(request: ImageRequest) -> list[Message]:
    """The request as one typed user message: [instruction, image_1, caption_1, ..., query caption]."""
    if not request.examples:
        return [Message("user", [TextPart(zero_shot_prompt(request.caption))])]
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

    candidates = getattr(resp, "candidates", None) or []
    if not candidates:
        feedback = getattr(resp, "prompt_feedback", None)
        reason = getattr(feedback, "block_reason", None)
        raise BackendError(f"{PROVIDER}: no candidates in the response" + (f" (blocked: {reason})" if reason else ""))
    cand = candidates[0]
    finish = getattr(cand, "finish_reason", None)
    finish = getattr(finish, "value", finish)
    parts = getattr(getattr(cand, "content", None), "parts", None) or []
    texts = [p.text for p in parts if getattr(p, "text", None)]
    for p in parts:
        blob = getattr(p, "inline_data", None)
        if blob is not None and str(getattr(blob, "mime_type", "")).startswith("image/") and blob.data:
            try:
                image = load_rgb(bytes(blob.data))
            except InputError as e:
                raise malformed_response(PROVIDER, "response image could not be decoded", str(e)) from None
            return image, {"model_text": " ".join(texts) or None, "finish_reason": finish}
    said = (" ".join(texts))[:300]
    raise BackendError(f"{PROVIDER}: the response has no image (finish reason {finish})"
                       + (f"; the model said: {said!r}" if said else ""))


class GeminiImageGenerator(ImageGenerator):
    local = False
    max_examples = None
    templates = (ZERO_SHOT, FEW_SHOT_GEMINI)

    def __init__(self, model: str, *, spec: str | None = None, base_url: str | None = None,
                 timeout: float = 300.0, api_key_env: str | None = None) -> None:
        self.model = model
        self.spec = spec or f"gemini-image:{model}"
        self.base_url = base_url
        self.timeout = float(timeout)
        self._conn = GeminiConnection(base_url=base_url, api_key_env=api_key_env, timeout=self.timeout)
        self.api_key_env = self._conn.api_key_env

    def prompt_text(self, request: ImageRequest) -> str:
        return render_for_log(image_prompt_messages(request))

    def generation_config(self, request: ImageRequest) -> Any:
        from google.genai import types

        ratio = nearest_aspect_ratio(request.width, request.height)
        return types.GenerateContentConfig(
            response_modalities=["TEXT", "IMAGE"], seed=int(request.seed),
            image_config=types.ImageConfig(aspect_ratio=ratio) if ratio != "1:1" else None)

    def generate(self, request: ImageRequest) -> GeneratedImage:
        self.check_k(len(request.examples))
        _, contents = render_gemini_contents(image_prompt_messages(request))
        client = self._conn.client()
        try:
            resp = client.models.generate_content(model=self.model, contents=contents,
                                                  config=self.generation_config(request))
        except Exception as e:
            mapped = map_gemini_error(e)  # SDK, transport and JSON errors; None for bugs
            if mapped is None:
                raise
            raise mapped from None
        image, extra = parse_image_response(resp)
        um = getattr(resp, "usage_metadata", None)
        usage = None
        if um is not None:
            usage = Usage(input_tokens=int(getattr(um, "prompt_token_count", 0) or 0), input_images=len(request.examples),
                          output_tokens=int(getattr(um, "candidates_token_count", 0) or 0))
        return GeneratedImage(image=image, meta={"prompt": self.prompt_text(request), **extra}, usage=usage)

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "backend": "gemini-image", "model": self.model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "timeout": self.timeout}

    def close(self) -> None:
        self._conn.close()
