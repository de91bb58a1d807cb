"""``openai-image:<model>``: OpenAI's images API (gpt-image-1, dall-e-3) through the official SDK.

Zero-shot goes to ``images.generate`` with the caption as the prompt. Few-shot goes to
``images.edit``, the endpoint that takes reference images: the example images are attached in
order and the prompt (``image_fewshot_api.txt``) numbers them with their captions before asking
for the query caption. The image comes back base64-encoded and is decoded here.

The SDK's own retries are off (``max_retries=0``); failures become BackendError through
:mod:`unirag.generators.http_errors`, and the shared retry loop honours ``Retry-After``. The key
comes from the environment only.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from unirag.data.images import load_rgb
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.base import Usage
from unirag.generators.http_errors import malformed_response, openai_errors
from unirag.generators.images.base import GeneratedImage, ImageGenerator, ImageRequest
from unirag.generators.images.templates import FEW_SHOT_API, ZERO_SHOT, render_listed
from unirag.generators.openai_client import OpenAIConnection
from unirag.messages import ImagePart

PROVIDER = "OpenAI images"

# Sizes each model accepts (checked before the run, so a bad --width/--height is one clear error
# instead of a 400 per query). Unknown models (compatible servers) are not checked.
_SIZES = {
    "gpt-image": {"1024x1024", "1536x1024", "1024x1536", "auto"},
    "dall-e-3": {"1024x1024", "1792x1024", "1024x1792"},
    "dall-e-2": {"256x256", "512x512", "1024x1024"},
}
def _family(model: str) -> str | None:
    for prefix in _SIZES:
        if model.startswith(prefix):
            return prefix
    return None


def decode_b64_image(b64: Any, provider: str):
    """Base64 image bytes -> RGB PIL image; a body that is not an image is a (transient) BackendError."""

    if not isinstance(b64, str) or not b64:
        raise malformed_response(provider, "malformed response body", "no base64 image data")
    try:
        return load_rgb(base64.b64decode(b64, validate=True))
    except (binascii.Error, InputError) as e:
        raise malformed_response(provider, "response image could not be decoded", str(e)) from None


def image_usage(usage: Any, n_images: int) -> Usage | None:
    """Token counts of an images response (gpt-image models report text and image input separately)."""
    if usage is None:
        return None
    details = getattr(usage, "input_tokens_details", None)
    return Usage(input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                 input_text_tokens=int(getattr(details, "text_tokens", 0) or 0),
                 input_image_tokens=int(getattr(details, "image_tokens", 0) or 0),
                 input_images=n_images, output_tokens=int(getattr(usage, "output_tokens", 0) or 0))


class OpenAIImageGenerator(ImageGenerator):
    """Thread-safe: one SDK client shared by the run loop's worker threads."""

    local = False
    templates = (ZERO_SHOT, FEW_SHOT_API)

    def __init__(self, model: str, *, spec: str | None = None, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float = 300.0, quality: str | None = None) -> None:
        self.model = model
        self.spec = spec or f"openai-image:{model}"
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.quality = quality
        # dall-e-2 edits take one image; dall-e-3 has no edit endpoint; gpt-image models take up to 16.
        family = _family(model)
        self.max_examples = {"dall-e-3": 0, "dall-e-2": 1, "gpt-image": 16}.get(family or "", None)
        self._conn = OpenAIConnection(base_url=base_url, api_key_env=api_key_env, timeout=self.timeout,
                                      server="images server")
        self.base_url = self._conn.base_url

    def check_size(self, width: int, height: int) -> None:
        super().check_size(width, height)
        family = _family(self.model)
        size = f"{width}x{height}"
        if family is not None and size not in _SIZES[family]:
            raise ConfigError(f"{self.model} cannot make {size} images; supported sizes: "
                              + ", ".join(sorted(_SIZES[family])))

    def prompt_text(self, request: ImageRequest) -> str:
        return render_listed(FEW_SHOT_API, request.caption, [e.caption for e in request.examples])

    def request_args(self, request: ImageRequest) -> dict[str, Any]:
        """Keyword arguments of ``images.generate`` (k = 0) or ``images.edit`` (k > 0)."""
        args: dict[str, Any] = {"model": self.model, "prompt": self.prompt_text(request), "n": 1,
                                "size": f"{request.width}x{request.height}"}
        if _family(self.model) == "gpt-image":
            args["output_format"] = "png"  # lossless; gpt-image models always answer in base64
        else:
            args["response_format"] = "b64_json"
        if self.quality:
            args["quality"] = self.quality
        if request.examples:
            files = []
            for i, ex in enumerate(request.examples, start=1):
                data, mime = ImagePart(path=ex.image, loading=request.loading).encoded()
                ext = {"image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}.get(mime, "png")
                files.append((f"example_{i}.{ext}", data, mime))
            args["image"] = files
        return args

    def generate(self, request: ImageRequest) -> GeneratedImage:
        self.check_k(len(request.examples))
        args = self.request_args(request)
        client = self._conn.client()
        with openai_errors(PROVIDER, self.timeout):
            if request.examples:
                resp = client.images.edit(**args)
            else:
                resp = client.images.generate(**args)
        data = getattr(resp, "data", None)
        if not data:
            raise malformed_response(PROVIDER, "malformed response body", "no data[] in the response")
        first = data[0]
        if getattr(first, "b64_json", None) is None and getattr(first, "url", None):
            raise BackendError(f"{PROVIDER}: the server returned a URL instead of base64 image data")
        image = decode_b64_image(getattr(first, "b64_json", None), PROVIDER)
        meta: dict[str, Any] = {"prompt": args["prompt"]}
        if getattr(first, "revised_prompt", None):
            meta["revised_prompt"] = first.revised_prompt
        return GeneratedImage(image=image, meta=meta,
                              usage=image_usage(getattr(resp, "usage", None), len(request.examples)))

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "backend": "openai-image", "model": self.model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "timeout": self.timeout, "quality": self.quality}

    def identity(self) -> dict[str, Any]:
        return {"quality": self.quality} if self.quality else {}

    def close(self) -> None:
        self._conn.close()
