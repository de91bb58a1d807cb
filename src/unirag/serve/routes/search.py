"""``POST /v1/search`` and ``POST /v1/cir``: ranked pool candidates for a text, an image, or both.

``/v1/search`` takes a multipart form (what the page and ``curl -F`` send; the only way to send an
image) or, for text searches, a JSON object with the same fields. Its fields are read here rather
than by FastAPI's form machinery: under load that machinery (dependency solving, field models) cost
more than the rest of a search's HTTP handling, and JSON skips the multipart parser as well.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException

from unirag.serve.engine import MODALITIES, SearchQuery
from unirag.serve.service import (
    check_k,
    hit_json,
    require_token,
    selection_json,
    selection_of,
)

router = APIRouter()

_FIELDS: dict[str, dict[str, Any]] = {
    "text": {"type": "string", "description": "what to search for (with an image: fused)"},
    "k": {"type": "integer", "default": 10, "minimum": 1},
    "modality": {"type": "string", "enum": list(MODALITIES), "default": "any"},
    "diversity": {"type": "string", "description": "example selection: none or mmr"},
    "mmr_lambda": {"type": "number"},
    "one_per_image": {"type": "boolean"},
    "near_duplicates": {"type": "string", "description": "flag or exclude"},
    "filter": {"type": "array", "items": {"type": "string"}, "description": "metadata filters FIELD=VALUE"},
}
_BODY = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        **_FIELDS, "image": {"type": "string", "format": "binary"}}}},
    "application/json": {"schema": {"type": "object", "properties": _FIELDS, "additionalProperties": False}},
}}}


@router.post("/v1/search", summary="Search by text, image, or both (fused); a form, or JSON for text",
             openapi_extra=_BODY)
async def search(request: Request):
    await require_token(request)  # called, not a dependency: FastAPI's dependency solving cost more per search
    svc = request.app.state.service
    form = None
    try:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            fields, upload = await _json_fields(request), None
        else:
            form = await request.form()
            fields, upload = _form_fields(form)
        text = fields.get("text")
        if text is not None and not isinstance(text, str):
            raise HTTPException(400, "text: must be a string")
        k = fields.get("k", 10)
        k = int(k) if isinstance(k, str) and k.strip().lstrip("-").isdigit() else k
        if not isinstance(k, int) or isinstance(k, bool):
            raise HTTPException(400, f"k: must be an integer, got {k!r}")
        k = check_k(k, svc.settings.k_max)
        modality = fields.get("modality", "any")
        if modality not in MODALITIES:
            raise HTTPException(400, f"modality must be one of {', '.join(MODALITIES)}, got {modality!r}")
        filters = fields.get("filter", [])
        fields["filter"] = filters = [filters] if isinstance(filters, str) else filters
        if not isinstance(filters, list) or not all(isinstance(v, str) for v in filters):
            raise HTTPException(400, "filter: must be a list of strings")
        selection = selection_of(fields)
        _, image = await svc.decodes.read(upload)
    finally:
        if form is not None:
            await form.close()
    if image is None and not (text and text.strip()):
        raise HTTPException(400, "send a text, an image, or both")
    query = SearchQuery(image=image, text=text, selection=selection)
    start = time.perf_counter()
    hits = await svc.batcher.search(query, k=k, modality=modality)
    # A JSONResponse, not a dict: FastAPI would walk the dict once more to make it "JSON-able".
    return JSONResponse({"hits": [hit_json(h) for h in hits], "latency_s": round(time.perf_counter() - start, 4),
                         "query": {"text": text, "image": image is not None, "k": k, "modality": modality,
                                   "selection": selection_json(selection)}})


async def _json_fields(request: Request) -> dict[str, Any]:
    try:
        fields = json.loads(await request.body())
    except ValueError as e:
        raise HTTPException(400, f"the JSON body does not parse: {e}") from None
    if not isinstance(fields, dict):
        raise HTTPException(400, "the JSON body must be an object of search fields")
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown:
        hint = " (send images as multipart/form-data)" if "image" in unknown else ""
        raise HTTPException(400, f"unknown field(s) {', '.join(unknown)}{hint}; a JSON search takes "
                                f"{', '.join(_FIELDS)}")
    return {name: value for name, value in fields.items() if value is not None}


def _form_fields(form: FormData) -> tuple[dict[str, Any], Any]:
    fields: dict[str, Any] = {name: value for name, value in form.multi_items()
                              if name in _FIELDS and name != "filter" and isinstance(value, str)}
    fields["filter"] = [f for f in form.getlist("filter") if isinstance(f, str)]
    upload = form.get("image")
    if isinstance(upload, str):
        if upload:
            raise HTTPException(400, "image: send a file, not a text field")
        upload = None
    return {name: value for name, value in fields.items() if value != ""}, upload


@router.post("/v1/cir", summary="Composed image retrieval: reference image + modification text",
             dependencies=[Depends(require_token)])
async def cir(request: Request, image: Annotated[UploadFile, File()], text: Annotated[str, Form()],
              k: Annotated[int, Form()] = 10, keep_reference: Annotated[bool, Form()] = False):
    svc = request.app.state.service
    check_k(k, svc.settings.k_max)
    data, picture = await svc.decodes.read(image, "image: send the reference image")
    if not text.strip():
        raise HTTPException(400, "text: say how the target differs from the reference image")
    start = time.perf_counter()
    hits, stage, note = await run_in_threadpool(svc.engine.cir, picture, text, k, data, keep_reference)
    return {"hits": [hit_json(h) for h in hits], "stage": stage, "note": note,
            "latency_s": round(time.perf_counter() - start, 4)}
