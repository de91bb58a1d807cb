"""The page (``/``, ``/static``), the API docs (``/docs``, ``/openapi.json``), ``/healthz`` and ``/metrics``.

In token mode the API docs need the token like every API route (the schema describes the deployment);
the page itself and its static files do not (the page asks for the token).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException

from unirag import __version__
from unirag.serve.service import require_token

STATIC = Path(__file__).resolve().parents[1] / "static"
router = APIRouter()


@router.get("/", include_in_schema=False)
async def page():
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
async def openapi(request: Request):
    return JSONResponse(request.app.openapi())


@router.get("/docs", include_in_schema=False, dependencies=[Depends(require_token)])
async def docs():
    from fastapi.openapi.docs import get_swagger_ui_html

    return get_swagger_ui_html(openapi_url="/openapi.json", title="unirag API",
                               swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                               swagger_css_url="/docs-assets/swagger-ui.css",
                               swagger_favicon_url="/docs-assets/favicon.png")


@router.get("/healthz", summary="Liveness, and what is loaded (in token mode only with the token)")
async def healthz(request: Request):
    svc = request.app.state.service
    try:
        await require_token(request)  # a no-op without a token
    except HTTPException:
        return {"status": "ok"}  # alive, and nothing about the deployment without the token
    # "process": which worker process answered, under unirag serve --workers N
    return {"status": "ok", "version": __version__, "auth": svc.token is not None, "process": os.getpid(),
            **svc.engine.info()}


@router.get("/metrics", dependencies=[Depends(require_token)], summary="Prometheus text metrics",
            response_class=PlainTextResponse)
async def metrics_text(request: Request):
    return PlainTextResponse(request.app.state.service.metrics.text(),
                             media_type="text/plain; version=0.0.4; charset=utf-8")
