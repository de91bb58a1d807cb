"""``unirag serve``: a REST API and an offline web page over one index (``pip install 'unirag[serve]'``).

    from unirag.serve import ServeSettings, create_app
    app = create_app(ServeSettings(index="indexes/offline"))   # any ASGI server can run it

Modules: :mod:`settings` (options, bind safety), :mod:`engine` (the library calls), :mod:`app`
(routes), :mod:`batching` (concurrent searches in one call), :mod:`uploads` (size/type/bomb checks),
:mod:`metrics` (Prometheus text), ``static/`` (the page); secrets are masked by :mod:`unirag.redact`.
FastAPI is imported only when :func:`create_app` is used.
"""

from __future__ import annotations

from typing import Any

from unirag.serve.settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]


def create_app(settings: ServeSettings, engine: Any = None):
    """Build the ASGI app (imports FastAPI); see :func:`unirag.serve.app.create_app`."""
    from unirag.serve.app import create_app as _create_app

    return _create_app(settings, engine)
