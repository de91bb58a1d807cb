"""The FastAPI application: middleware, refusals and the routers; all work is done by the engine.

``create_app(settings)`` loads the index once and returns an ASGI app; ``unirag serve`` runs it on
uvicorn. The routes live in :mod:`unirag.serve.routes`, one router per area. Every answer is JSON
(``{"error": ...}`` on failure) except the page, the pool images and ``/metrics``. Status codes: 400
bad input or an image that cannot be decoded (or a decompression bomb), 401 missing/wrong bearer
token, 404 unknown candidate id, 413 upload too large, 415 not an accepted image type, 503 generator
unavailable (searches keep working).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from unirag import __version__
from unirag.errors import BackendError, ConfigError, InputError
from unirag.redact import install_log_redaction, redact
from unirag.serve.batching import SearchBatcher
from unirag.serve.engine import Engine
from unirag.serve.metrics import Metrics, ObserveRequests
from unirag.serve.routes import generate, images, page, search
from unirag.serve.service import Service
from unirag.serve.settings import ServeSettings
from unirag.serve.uploads import BodyLimit, DecodeSlots

log = logging.getLogger("unirag.serve")


def create_app(settings: ServeSettings, engine: Engine | None = None) -> FastAPI:
    """The service for ``settings``; ``engine`` may be shared (tests build one per index, not per app)."""
    settings.check()
    engine = engine or Engine(settings)
    metrics = Metrics()
    batcher = SearchBatcher(engine.search_batch, max_batch=settings.max_batch, on_batch=metrics.observe_batch,
                            executor=engine.model_thread)
    svc = Service(settings, engine, metrics, batcher, DecodeSlots(settings), settings.token())
    install_log_redaction(svc.secrets)  # every logger of the process, uvicorn's access log included

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()
        svc.decodes.close()

    # FastAPI's own /docs page loads Swagger UI from a CDN and its /openapi.json takes no token: the
    # page router serves both (Swagger UI from a package, the schema behind the token in token mode).
    app = FastAPI(title="unirag", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None,
                  description="Multimodal search, RAG captioning and composed image retrieval over one index.")
    app.state.service = svc

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": redact(message, svc.secrets)}, status_code=status, headers=headers)

    # with room for the multipart framing and the text fields around one upload
    app.add_middleware(BodyLimit, limit=settings.max_upload_bytes + 64 * 1024)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(ObserveRequests, metrics=metrics)

    @app.exception_handler(ConfigError)
    @app.exception_handler(InputError)
    async def _bad_input(request: Request, e: ConfigError | InputError):
        return error(400, str(e))

    @app.exception_handler(BackendError)
    async def _generator_failed(request: Request, e: BackendError):
        """A generator call that still failed after its retries: 503 (searches keep working), counted by kind."""
        endpoint = request.scope["route"].path
        metrics.generator_errors.labels(endpoint, f"http_{e.status}" if e.status else
                                        ("transient" if e.retryable else "permanent")).inc()
        log.warning("%s: generator failed: %s", endpoint, e)
        return error(503, f"generator unavailable: {e}. Search keeps working; try again later.")

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, e: HTTPException):
        """Every refusal (the routes', the upload checks', Starlette's own): ``{"error": ...}``, secrets masked."""
        return error(e.status_code, str(e.detail), e.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        parts = []
        for err in e.errors():
            where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path"))
            parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        return error(400, "; ".join(parts) or "invalid request")

    # Routes match in the order they are added: the searches first, as they are most of the traffic. The
    # areas' routes join the app's own router instead of being included: FastAPI 0.16x keeps an included
    # router apart and walks all of its routes on every request (15 % of the event loop's time at 16 clients).
    for area in (search, generate, images, page):
        app.router.routes.extend(area.router.routes)
    app.mount("/static", StaticFiles(directory=page.STATIC), name="static")
    # Swagger UI 5 (it reads the OpenAPI 3.1 schema FastAPI writes; 4.x cannot) as the fastapi-offline
    # package ships it, so the API docs work offline like the page does.
    app.mount("/docs-assets", StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-assets")
    return app
