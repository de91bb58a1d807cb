"""Checks on uploaded images, before any of their pixels are decoded.

Order matters: the byte size is checked while reading (413), the type from the file's magic bytes
rather than the client's Content-Type (415), and the pixel count from the header before decoding
(400), so a small file that decodes into gigabytes - a decompression bomb - is refused unread.
Nothing from the request (file name, path) is ever used to touch the file system.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Magic bytes -> (format name PIL reports, what to call it in messages).
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
)
ACCEPTED = "JPEG, PNG, WebP, GIF or BMP"


class UploadError(Exception):
    """A refused upload: ``status`` is the HTTP status (400, 413, 415), the message says what to fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class CheckedImage:
    """An upload that passed every check: the original bytes and the decoded RGB image."""

    data: bytes
    format: str
    image: object  # PIL.Image.Image (RGB)

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


def sniff_format(data: bytes) -> str | None:
    """The image format the bytes start with, or None (WebP is RIFF....WEBP)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    for magic, name in _SIGNATURES:
        if data.startswith(magic):
            return name
    return None


def check_size(n_bytes: int, limit: int, field: str = "image") -> None:
    if n_bytes > limit:
        raise UploadError(413, f"{field}: upload is larger than the {_mb(limit)} limit")


def check_image(data: bytes, *, max_bytes: int, max_pixels: int, field: str = "image") -> CheckedImage:
    """Validate and decode one uploaded image; raises :class:`UploadError` with the status to send.

    Decoding is :func:`unirag.data.images.load_rgb`'s, as for the index: EXIF orientation applied,
    16-bit and float images mapped to 8 bits, transparency on white, the first frame of an animation,
    and the pixel limit checked from the header before anything is decoded.
    """
    from unirag.data.images import load_rgb
    from unirag.errors import InputError

    check_size(len(data), max_bytes, field)
    if not data:
        raise UploadError(400, f"{field}: the uploaded file is empty")
    fmt = sniff_format(data)
    if fmt is None:
        raise UploadError(415, f"{field}: not an image this service accepts; send {ACCEPTED}")
    try:
        rgb = load_rgb(data, max_pixels=max_pixels)
    except InputError as e:
        reason = e.reason.replace("cannot decode image bytes", f"cannot decode the {fmt} image")
        raise UploadError(400, f"{field}: {reason}") from None
    return CheckedImage(data, fmt, rgb)


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB" if n >= 1024 * 1024 else f"{n} bytes"


class BodyLimit:
    """ASGI middleware: stop reading a request body once it exceeds ``limit`` bytes (413).

    The Content-Length check refuses declared large bodies before reading; this one also covers
    chunked uploads that declare no length, so no request can make the server spool more than
    ``limit`` bytes.
    """

    def __init__(self, app, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise UploadError(413, f"request body is larger than {_mb(self.limit)} (the upload limit "
                                           "plus room for the form around it)")
            return message

        await self.app(scope, limited_receive, send)
