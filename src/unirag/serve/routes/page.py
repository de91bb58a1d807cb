"""The page (``/``, ``/static``), the API docs (``/docs``), ``/healthz`` and ``/metrics``."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, PlainTextResponse

from unirag import __version__
from unirag.serve.service import ServiceError, require_token, service_of

STATIC = Path(__file__).resolve().parents[1] / "static"
router = APIRouter()


@router.get("/", include_in_schema=False)
async def page():
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/docs", include_in_schema=False)
async def docs(request: Request):
    from fastapi.openapi.docs import get_swagger_ui_html

    return get_swagger_ui_html(openapi_url=request.app.openapi_url, title="unirag API",
                               swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                               swagger_css_url="/docs-assets/swagger-ui.css",
                               swagger_favicon_url="/docs-assets/favicon-32x32.png")


@router.get("/healthz", summary="Liveness, and what is loaded (in token mode only with the token)")
async def healthz(request: Request):
    svc = service_of(request)
    if svc.token is not None:
        try:
            await require_token(request)
        except ServiceError:
            return {"status": "ok"}  # alive, and nothing about the deployment without the token
    return {"status": "ok", "version": __version__, "auth": svc.token is not None, **svc.engine.info()}


@router.get("/metrics", dependencies=[Depends(require_token)], summary="Prometheus text metrics",
            response_class=PlainTextResponse)
async def metrics_text(request: Request):
    return PlainTextResponse(service_of(request).metrics.render(),
                             media_type="text/plain; version=0.0.4; charset=utf-8")
