"""What every route reaches: the loaded :class:`Service` and the helpers the routes share.

:func:`create_app <unirag.serve.app.create_app>` puts one :class:`Service` on ``app.state``; routes
get it as ``request.app.state.service``. Refusals are Starlette's ``HTTPException``.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Form, Request
from starlette.exceptions import HTTPException

from unirag.retrieval.results import Hit
from unirag.retrieval.selection import Selection, selection_from_settings
from unirag.serve.batching import SearchBatcher
from unirag.serve.engine import Engine
from unirag.serve.metrics import Metrics
from unirag.serve.settings import ServeSettings
from unirag.serve.uploads import DecodeSlots


@dataclass
class Service:
    """One process's loaded state, shared by all requests."""

    settings: ServeSettings
    engine: Engine
    metrics: Metrics
    batcher: SearchBatcher
    decodes: DecodeSlots
    token: str | None = None

    @property
    def secrets(self) -> tuple[str, ...]:
        """What :func:`unirag.redact.redact` masks in answers and log lines."""
        return (self.token,) if self.token else ()


async def require_token(request: Request) -> None:
    """The bearer-token check (a no-op without --token-env). Async: a plain function would cost
    every request a hop to the thread pool."""
    token = request.app.state.service.token
    if token is None:
        return
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise HTTPException(401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')",
                            headers={"WWW-Authenticate": "Bearer"})


#: The selection of a request that sets none of the fields (most searches): built once.
_DEFAULT_SELECTION = Selection()


@lru_cache(maxsize=4096)
def image_url(did: str | None) -> str | None:
    return f"/v1/images/{quote(did, safe=':')}" if did else None


def hit_json(h: Hit) -> dict[str, Any]:
    """A hit as the service returns it: its caption and image are those of the pair it is shown with."""
    out = {"did": h.did, "score": round(h.score, 6) if h.score is not None else None, "modality": h.modality,
           "caption": h.pair.caption, "image_url": image_url(h.pair.image_did)}
    if h.pair.near_duplicate is not None:
        out["near_duplicate"] = h.pair.near_duplicate
    return out


def examples_json(examples) -> list[dict[str, Any]]:
    return [{"caption": e.caption, "image_url": image_url(e.image_did), "did": e.image_did,
             **({"near_duplicate": e.near_duplicate} if e.near_duplicate else {})} for e in examples]


def selection_of(fields: dict[str, Any]):
    """The :class:`unirag.Selection` a request's example-selection fields ask for, each read as ``--set``
    reads it (:func:`~unirag.retrieval.selection.selection_from_settings`); unset fields keep the defaults."""
    given = {name: fields[name] for name in ("diversity", "mmr_lambda", "one_per_image", "near_duplicates")
             if fields.get(name) not in (None, "")}
    if filters := [f for f in fields.get("filter") or () if f.strip()]:
        given["filter"] = filters
    return selection_from_settings(given) if given else _DEFAULT_SELECTION


@lru_cache(maxsize=256)
def selection_json(selection: Selection) -> dict[str, Any]:
    """``selection.to_dict()`` for an answer, once per distinct (frozen) selection: ``asdict`` walked
    it for every search."""
    return selection.to_dict()


async def selection_of_form(diversity: Annotated[str | None, Form()] = None,
                            mmr_lambda: Annotated[float | None, Form()] = None,
                            one_per_image: Annotated[bool | None, Form()] = None,
                            near_duplicates: Annotated[str | None, Form()] = None,
                            filter: Annotated[list[str] | None, Form()] = None):  # noqa: A002 - the API's field
    """:func:`selection_of` as a FastAPI dependency, so every endpoint that retrieves examples takes the
    same five form fields."""
    return selection_of(locals())  # the five fields, by name


def check_k(k: int, k_max: int) -> int:
    if not 1 <= k <= k_max:
        raise HTTPException(400, f"k must be between 1 and {k_max}, got {k}")
    return k
