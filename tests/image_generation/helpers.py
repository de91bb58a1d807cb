"""Helpers shared by the image-generation tests: exact pixels, fake image API replies, multipart parsing."""

from __future__ import annotations

import base64
import io
from email.parser import BytesParser
from email.policy import default as default_policy
from pathlib import Path

from fake_openai_server import RecordedRequest, Reply


def read_pixels(path: Path):
    """Exact pixel array of an image file (RGB, uint8)."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB")).copy()


def solid_png(color: tuple[int, int, int], size: tuple[int, int] = (16, 12)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def openai_image_reply(png: bytes, input_tokens: int = 50, image_tokens: int = 0, output_tokens: int = 272) -> Reply:
    """An images.generate / images.edit answer (gpt-image-1 shape: b64_json + token usage)."""
    return Reply(json={
        "created": 1, "data": [{"b64_json": base64.b64encode(png).decode("ascii")}],
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "total_tokens": input_tokens + output_tokens,
                  "input_tokens_details": {"text_tokens": input_tokens - image_tokens, "image_tokens": image_tokens}},
    })


def multipart_fields(req: RecordedRequest) -> list[tuple[str, str | None, str, bytes]]:
    """(field name, filename, content type, payload) of each part of a multipart/form-data request."""
    head = f"Content-Type: {req.headers['content-type']}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    msg = BytesParser(policy=default_policy).parsebytes(head + req.raw)
    assert msg.is_multipart(), req.headers.get("content-type")
    out = []
    for part in msg.iter_parts():
        out.append((part.get_param("name", header="content-disposition"), part.get_filename(),
                    part.get_content_type(), part.get_payload(decode=True)))
    return out
