"""The FastAPI application: routes, refusals, metrics and the page; all work is done by the engine.

``create_app(settings)`` loads the index once and returns an ASGI app; ``unirag serve`` runs it on
uvicorn. Every answer is JSON (``{"error": ...}`` on failure) except the page, the pool images and
``/metrics``. Status codes: 400 bad input or an image that cannot be decoded (or a decompression
bomb), 401 missing/wrong bearer token, 404 unknown candidate id, 413 upload too large, 415 not an
accepted image type, 503 generator unavailable (searches keep working).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import logging
import time
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, File, Form, Request, UploadFile
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from unirag import __version__
from unirag.errors import BackendError, ConfigError, InputError
from unirag.serve.batching import SearchBatcher
from unirag.serve.engine import CAPTION_MODES, MODALITIES, Engine, Hit, SearchQuery
from unirag.serve.metrics import Metrics
from unirag.serve.redact import install_log_redaction, redact
from unirag.serve.settings import ServeSettings
from unirag.serve.uploads import BodyLimit, UploadError, check_image

STATIC = Path(__file__).resolve().parent / "static"
THUMB_SIZES = range(16, 1025)
#: Room for the multipart framing and the text fields around one upload.
_FORM_OVERHEAD = 64 * 1024

log = logging.getLogger("unirag.serve")


class ServiceError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def image_url(did: str | None) -> str | None:
    return f"/v1/images/{quote(did, safe=':')}" if did else None


def hit_json(h: Hit) -> dict[str, Any]:
    out = {"did": h.did, "score": round(h.score, 6) if h.score is not None else None, "modality": h.modality,
           "caption": h.caption,
           "image_url": image_url(h.image_did)}
    if h.near_duplicate is not None:
        out["near_duplicate"] = h.near_duplicate
    return out


def selection_of_form(diversity: Annotated[str | None, Form()] = None,
                      mmr_lambda: Annotated[float | None, Form()] = None,
                      one_per_image: Annotated[bool | None, Form()] = None,
                      near_duplicates: Annotated[str | None, Form()] = None,
                      filter: Annotated[list[str] | None, Form()] = None):  # noqa: A002 - the API's field name
    """The :class:`unirag.Selection` of a request's form fields (unset fields keep the defaults): a
    FastAPI dependency, so every endpoint that retrieves examples takes the same five fields."""
    from unirag.retrieval.selection import Selection, parse_filters

    try:
        return Selection.of(None, diversity=diversity or None, mmr_lambda=mmr_lambda, one_per_image=one_per_image,
                            near_duplicates=near_duplicates or None,
                            where=parse_filters([f for f in filter or () if f and f.strip()]) or None)
    except ConfigError as e:
        raise ServiceError(400, str(e)) from None


def create_app(settings: ServeSettings, engine: Engine | None = None) -> FastAPI:
    """The service for ``settings``; ``engine`` may be shared (tests build one per index, not per app)."""
    settings.check()
    token = settings.token()
    secrets = (token,) if token else ()
    install_log_redaction(secrets)  # every logger of the process, uvicorn's access log included
    engine = engine or Engine(settings)
    metrics = Metrics()
    batcher = SearchBatcher(engine.search_batch, max_batch=settings.max_batch, on_batch=metrics.observe_batch)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()

    # docs_url=None: FastAPI's own /docs page loads Swagger UI from a CDN; ours serves it from the
    # swagger-ui-bundle package so that the docs work offline like the page does.
    app = FastAPI(title="unirag", version=__version__, lifespan=lifespan, docs_url=None,
                  description="Multimodal search, RAG captioning and composed image retrieval over one index.")
    app.state.engine, app.state.metrics, app.state.settings, app.state.batcher = engine, metrics, settings, batcher

    app.add_middleware(BodyLimit, limit=settings.max_upload_bytes + _FORM_OVERHEAD)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    # -- plumbing ---------------------------------------------------------------------------------
    def require_token(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            raise ServiceError(401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')")

    auth = [Depends(require_token)]

    @app.middleware("http")
    async def observe(request: Request, call_next):
        start = time.perf_counter()
        length = request.headers.get("content-length")
        if request.method == "POST" and length and length.isdigit() and \
                int(length) > settings.max_upload_bytes + _FORM_OVERHEAD:
            response: Response = _error(413, f"request body is larger than the "
                                             f"{settings.max_upload_bytes / 1024 / 1024:.1f} MB upload limit")
        else:
            response = await call_next(request)
        route = request.scope.get("route")
        endpoint = getattr(route, "path", None) or ("static" if request.url.path.startswith("/static/")
                                                    else "unmatched")
        metrics.observe_request(endpoint, request.method, response.status_code, time.perf_counter() - start)
        return response

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, e: ServiceError):
        return _error(e.status, e.message, {"WWW-Authenticate": "Bearer"} if e.status == 401 else None)

    @app.exception_handler(UploadError)
    async def _upload_error(request: Request, e: UploadError):
        return _error(e.status, e.message)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, e: HTTPException):
        if isinstance(e.__cause__, UploadError):  # raised while FastAPI parsed the form (BodyLimit)
            return _error(e.__cause__.status, e.__cause__.message)
        return _error(e.status_code, str(e.detail))

    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        parts = []
        for err in e.errors():
            where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path"))
            parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        return _error(400, "; ".join(parts) or "invalid request")

    def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": redact(message, secrets)}, status_code=status, headers=headers)

    async def _read_image(upload: UploadFile | None, field: str):
        if upload is None:
            return None
        data = await upload.read(settings.max_upload_bytes + 1)
        if not data and not upload.filename:
            return None  # a form's empty file input; size and emptiness are check_image's
        return await run_in_threadpool(check_image, data, max_bytes=settings.max_upload_bytes,
                                       max_pixels=settings.max_pixels, field=field)

    def _check_k(k: int) -> int:
        if not 1 <= k <= settings.k_max:
            raise ServiceError(400, f"k must be between 1 and {settings.k_max}, got {k}")
        return k

    async def _engine_call(endpoint: str, fn, *args):
        """Run a blocking engine call; library errors become 400, generator failures 503."""
        try:
            return await run_in_threadpool(fn, *args)
        except BackendError as e:
            kind = f"http_{e.status}" if e.status else ("transient" if e.retryable else "permanent")
            metrics.generator_error(endpoint, kind)
            log.warning("%s: generator failed: %s", endpoint, e)
            raise ServiceError(503, f"generator unavailable: {e}. Search keeps working; try again later.") from None
        except (ConfigError, InputError) as e:
            raise ServiceError(400, str(e)) from None

    # -- page and health --------------------------------------------------------------------------
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs-assets", StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs():
        from fastapi.openapi.docs import get_swagger_ui_html

        return get_swagger_ui_html(openapi_url=app.openapi_url, title="unirag API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon-32x32.png")

    @app.get("/healthz", summary="Liveness, and what is loaded (in token mode only with the token)")
    async def healthz(request: Request):
        if token is not None:
            try:
                require_token(request)
            except ServiceError:
                return {"status": "ok"}  # alive, and nothing about the deployment without the token
        return {"status": "ok", "version": __version__, "auth": token is not None, **engine.info()}

    @app.get("/metrics", dependencies=auth, summary="Prometheus text metrics",
             response_class=PlainTextResponse)
    async def metrics_text():
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # -- API ----------------------------------------------------------------------------------------
    @app.post("/v1/search", dependencies=auth, summary="Search by text, image, or both (fused)")
    async def search(selection: Annotated[Any, Depends(selection_of_form)],
                     text: Annotated[str | None, Form()] = None, image: Annotated[UploadFile | None, File()] = None,
                     k: Annotated[int, Form()] = 10, modality: Annotated[str, Form()] = "any"):
        _check_k(k)
        if modality not in MODALITIES:
            raise ServiceError(400, f"modality must be one of {', '.join(MODALITIES)}, got {modality!r}")
        checked = await _read_image(image, "image")
        if checked is None and not (text and text.strip()):
            raise ServiceError(400, "send a text, an image, or both")
        query = SearchQuery(image=checked.image if checked else None, text=text, selection=selection)
        start = time.perf_counter()
        try:
            hits = await batcher.search(query, k=k, modality=modality)
        except (ConfigError, InputError) as e:
            raise ServiceError(400, str(e)) from None
        return {"hits": [hit_json(h) for h in hits], "latency_s": round(time.perf_counter() - start, 4),
                "query": {"text": text, "image": checked is not None, "k": k, "modality": modality,
                          "selection": selection.to_dict()}}

    @app.post("/v1/caption", dependencies=auth, summary="Caption an image with few-shot examples")
    async def caption(selection: Annotated[Any, Depends(selection_of_form)], image: Annotated[UploadFile, File()],
                      mode: Annotated[str, Form()] = "rag", k: Annotated[int, Form()] = 5):
        if mode not in CAPTION_MODES:
            raise ServiceError(400, f"mode must be one of {', '.join(CAPTION_MODES)}, got {mode!r}")
        if mode != "zero-shot":
            _check_k(k)
        checked = await _read_image(image, "image")
        if checked is None:
            raise ServiceError(400, "image: send the image to caption")
        start = time.perf_counter()
        ans = await _engine_call("/v1/caption", engine.caption, checked.image, checked.data, mode,
                                 k if mode != "zero-shot" else 0, selection)
        # Generator output is untrusted text: a server could echo the credentials it was sent.
        return {"caption": redact(ans.caption, secrets), "mode": mode, "k": len(ans.examples),
                "examples": [{"caption": e.caption, "image_url": image_url(e.image_did), "did": e.image_did,
                              **({"near_duplicate": e.near_duplicate} if e.near_duplicate else {})}
                             for e in ans.examples],
                "selection": selection.to_dict(),
                "latency_s": round(time.perf_counter() - start, 4), "usage": ans.usage, "cost_usd": ans.cost_usd,
                "attempts": ans.attempts, "generator": ans.generator}

    @app.post("/v1/generate-image", dependencies=auth, summary="Generate an image from text with examples")
    async def generate_image(selection: Annotated[Any, Depends(selection_of_form)], text: Annotated[str, Form()],
                             mode: Annotated[str, Form()] = "rag", k: Annotated[int, Form()] = 1):
        if mode not in CAPTION_MODES:
            raise ServiceError(400, f"mode must be one of {', '.join(CAPTION_MODES)}, got {mode!r}")
        if not text.strip():
            raise ServiceError(400, "text: describe the image to generate")
        if mode != "zero-shot":
            _check_k(k)
        start = time.perf_counter()
        ans = await _engine_call("/v1/generate-image", engine.generate_image, text, mode,
                                 k if mode != "zero-shot" else 0, selection)
        buf = io.BytesIO()
        ans.image.save(buf, format="PNG")
        return {"image": "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii"),
                "width": ans.image.size[0], "height": ans.image.size[1],
                "examples": [{"caption": e.caption, "image_url": image_url(e.image_did), "did": e.image_did,
                              **({"near_duplicate": e.near_duplicate} if e.near_duplicate else {})}
                             for e in ans.examples],
                "selection": selection.to_dict(),
                "latency_s": round(time.perf_counter() - start, 4), "attempts": ans.attempts,
                "generator": ans.generator}

    @app.post("/v1/cir", dependencies=auth, summary="Composed image retrieval: reference image + modification text")
    async def cir(image: Annotated[UploadFile, File()], text: Annotated[str, Form()], k: Annotated[int, Form()] = 10):
        _check_k(k)
        checked = await _read_image(image, "image")
        if checked is None:
            raise ServiceError(400, "image: send the reference image")
        if not text.strip():
            raise ServiceError(400, "text: say how the target differs from the reference image")
        start = time.perf_counter()
        ans = await _engine_call("/v1/cir", engine.cir, checked.image, text, k)
        return {"hits": [hit_json(h) for h in ans.hits], "stage": ans.stage, "note": ans.note,
                "latency_s": round(time.perf_counter() - start, 4)}

    @app.get("/v1/images/{did:path}", dependencies=auth, summary="A pool image by candidate id (optionally resized)",
             response_class=Response)
    async def pool_image(did: str, request: Request, size: int | None = None):
        if size is not None and size not in THUMB_SIZES:
            raise ServiceError(400, f"size must be between {THUMB_SIZES.start} and {THUMB_SIZES.stop - 1} pixels")
        path = engine.image_file(did)
        if path is None:
            raise ServiceError(404, f"no pool image with candidate id {did!r}")
        stat = path.stat()
        etag = '"' + hashlib.sha256(f"{did}|{size}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:32] + '"'
        headers = {"ETag": etag, "Cache-Control": f"{'private' if token else 'public'}, max-age=86400"}
        if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        found = await run_in_threadpool(_image_bytes, str(path), stat.st_mtime_ns, size)
        if found is None:
            raise ServiceError(410, f"the pool image of candidate {did!r} no longer decodes as an image")
        data, media = found
        return Response(data, media_type=media, headers=headers)

    return app


_MEDIA_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp",
                "BMP": "image/bmp"}


@lru_cache(maxsize=512)
def _image_bytes(path: str, mtime_ns: int, size: int | None) -> tuple[bytes, str] | None:
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
            return (raw, _MEDIA_TYPES[fmt]) if fmt is not None else (png_bytes(pixels), "image/png")
        im = load_rgb(raw, draft=size)
    except InputError:
        return None
    im.thumbnail((size, size))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=85)
    return buf.getvalue(), "image/jpeg"
