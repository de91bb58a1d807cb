"""Checks on uploaded images, before any of their pixels are decoded.

Order matters: the byte size is checked while reading (413), the type from the file's magic bytes
rather than the client's Content-Type (415), and the pixel count from the header before decoding
(400), so a small file that decodes into gigabytes - a decompression bomb - is refused unread.
Nothing from the request (file name, path) is ever used to touch the file system.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor

from starlette.exceptions import HTTPException

#: (magic bytes, the format name PIL reports)
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
)
#: Uploads are decoded no smaller than this a side (JPEG: at a reduced DCT scale; other formats: reduced
#: by an integer factor right after decoding). Encoders take 224-448 pixels, so the answers do not
#: change, while what a request holds until its search is answered stays a few megabytes whatever
#: size the image declares (a 6000x6000 upload: 857x857).
DECODE_SIDE = 768


def sniff_format(data: bytes) -> str | None:
    """The image format the bytes start with, or None (WebP is RIFF....WEBP)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    for magic, name in _SIGNATURES:
        if data.startswith(magic):
            return name
    return None


def check_image(data: bytes, *, max_bytes: int, max_pixels: int):
    """Validate and decode one upload (to RGB); raises :class:`HTTPException` with the status to send.

    Decoding is :func:`unirag.data.images.load_rgb`'s, as for the index: EXIF orientation applied,
    16-bit and float images mapped to 8 bits, transparency on white, the first frame of an animation,
    and the pixel limit checked from the header before anything is decoded; at a reduced size no
    smaller than :data:`DECODE_SIDE` a side.
    """
    from unirag.data.images import load_rgb
    from unirag.errors import InputError

    if len(data) > max_bytes:
        raise HTTPException(413, f"image: upload is larger than the {_mb(max_bytes)} limit")
    if not data:
        raise HTTPException(400, "image: the uploaded file is empty")
    fmt = sniff_format(data)
    if fmt is None:
        raise HTTPException(415, "image: not an image this service accepts; send JPEG, PNG, WebP, GIF or BMP")
    try:
        return load_rgb(data, max_pixels=max_pixels, draft=DECODE_SIDE)
    except InputError as e:
        reason = e.reason.replace("cannot decode image bytes", f"cannot decode the {fmt} image")
        raise HTTPException(400, f"image: {reason}") from None


class DecodeSlots:
    """Uploads are read and checked (:func:`check_image`) with the ``settings``' limits, and decode on
    ``max_decodes`` threads of their own, with at most ``decode_queue`` more queued; a request
    beyond that gets 503 with Retry-After. A PNG cannot be decoded at a reduced size, so each decode
    briefly holds its full-size pixels (up to 4 bytes x the pixel limit): bounding how many run at
    once is what keeps the server's memory independent of how many large uploads arrive. Threads of
    their own rather than the shared pool: memory a decode frees stays with its thread's allocator
    arena, so decodes spread over 40 pool threads would keep 40 image-sized arenas resident."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self._pool = ThreadPoolExecutor(max_workers=settings.max_decodes, thread_name_prefix="unirag-decode")
        self.limit = settings.max_decodes + settings.decode_queue
        self._admitted = threading.BoundedSemaphore(self.limit)

    async def read(self, upload, missing: str | None = None):
        """The upload's bytes and checked image, decoded on a decode thread once one is free (or 503 when the
        queue is full); (None, None) for no file - a 400 saying ``missing`` when the route needs one."""
        limit = self.settings.max_upload_bytes
        data = await upload.read(limit + 1) if upload is not None else b""
        if not data and (upload is None or not upload.filename):
            if missing:
                raise HTTPException(400, missing)
            return None, None  # a form's empty file input; size and emptiness are check_image's
        if not self._admitted.acquire(blocking=False):
            raise HTTPException(503, f"too many images are being decoded ({self.limit} at once); try again in a "
                                    "moment", headers={"Retry-After": "1"})
        try:
            future = self._pool.submit(_decode, data, self.settings)
        except BaseException:
            self._admitted.release()
            raise
        # released when the decode ends, even if the client left
        future.add_done_callback(lambda _: self._admitted.release())
        return data, await asyncio.wrap_future(future)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _decode(data: bytes, settings):
    """:func:`check_image` with the ``settings``' limits, then hand the memory the decode freed back to the
    system (glibc keeps freed blocks of up to 32 MB in the thread's arena: an idle server would stay at its
    peak otherwise)."""
    try:
        return check_image(data, max_bytes=settings.max_upload_bytes, max_pixels=settings.max_pixels)
    finally:
        _malloc_trim()(0)


@functools.cache
def _malloc_trim():
    """The C library's ``malloc_trim`` (glibc; not musl, not macOS), else a no-op."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda pad: None


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB" if n >= 1024 * 1024 else f"{n} bytes"


class BodyLimit:
    """ASGI middleware: no request can make the server spool more than ``limit`` bytes (413). A body
    that declares a larger Content-Length is refused before any of it is read; a chunked upload that
    declares none is stopped once it exceeds the limit."""

    def __init__(self, app, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.message = f"request body is larger than {_mb(limit)} (the upload limit plus room for the form around it)"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            from starlette.responses import JSONResponse

            return await JSONResponse({"error": self.message}, status_code=413)(scope, receive, send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413, self.message)
            return message

        await self.app(scope, limited_receive, send)
