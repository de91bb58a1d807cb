"""``GET /v1/images/{did}``: a pool image by candidate id, as stored or as a JPEG thumbnail.

``did`` is only ever a key into the index's metadata (:meth:`unirag.serve.engine.Engine.image_file`):
no part of a request reaches the file system.
"""

from __future__ import annotations

import hashlib
import io
from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from unirag.serve.service import require_token

router = APIRouter(dependencies=[Depends(require_token)])
THUMB_SIZES = range(16, 1025)


@router.get("/v1/images/{did:path}", summary="A pool image by candidate id (optionally resized)",
            response_class=Response)
async def pool_image(did: str, request: Request, size: int | None = None):
    svc = request.app.state.service
    if size is not None and size not in THUMB_SIZES:
        raise HTTPException(400, f"size must be between {THUMB_SIZES.start} and {THUMB_SIZES.stop - 1} pixels")
    path = svc.engine.image_file(did)
    if path is None:
        raise HTTPException(404, f"no pool image with candidate id {did!r}")
    stat = path.stat()
    etag = '"' + hashlib.sha256(f"{did}|{size}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:32] + '"'
    headers = {"ETag": etag, "Cache-Control": f"{'private' if svc.token else 'public'}, max-age=86400"}
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    found = await run_in_threadpool(image_bytes, str(path), stat.st_mtime_ns, size)
    if found is None:
        raise HTTPException(410, f"the pool image of candidate {did!r} no longer decodes as an image")
    data, media = found
    return Response(data, media_type=media, headers=headers)


@lru_cache(maxsize=512)
def image_bytes(path: str, mtime_ns: int, size: int | None) -> tuple[bytes, str] | None:
    """The file as stored (when it is in a web format and decodes), else a PNG of its pixels; with
    ``size``, an upright JPEG thumbnail whose longer side is ``size``. None when the file no longer
    decodes as an image. Decoding is the index's (:func:`unirag.data.images.load_rgb`), so a thumbnail
    shows what was embedded. Cached per file version."""
    from unirag.data.images import load_rgb, png_bytes
    from unirag.errors import InputError
    from unirag.serve.uploads import sniff_format

    raw = Path(path).read_bytes()
    try:
        if size is None:
            fmt = sniff_format(raw)
            pixels = load_rgb(raw, draft=64 if fmt is not None else None)  # it must still be an image
            return (raw, f"image/{fmt.lower()}") if fmt is not None else (png_bytes(pixels), "image/png")
        im = load_rgb(raw, draft=size)
    except InputError:
        return None
    im.thumbnail((size, size))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=85)
    return buf.getvalue(), "image/jpeg"
