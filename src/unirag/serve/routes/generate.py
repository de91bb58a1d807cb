"""``POST /v1/caption`` and ``POST /v1/generate-image``: a generator answer with the examples that went
into its prompt (zero-shot, random or retrieved)."""

from __future__ import annotations

import base64
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from unirag.pipelines.examples import MODES
from unirag.redact import redact
from unirag.serve.service import (
    check_k,
    examples_json,
    require_token,
    selection_json,
    selection_of_form,
)

router = APIRouter(dependencies=[Depends(require_token)])


def _check_mode(mode: str, k: int, k_max: int) -> int:
    """The example count a mode takes (none for zero-shot)."""
    if mode not in MODES:
        raise HTTPException(400, f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return 0 if mode == "zero-shot" else check_k(k, k_max)


@router.post("/v1/caption", summary="Caption an image with few-shot examples")
async def caption(request: Request, selection: Annotated[Any, Depends(selection_of_form)],
                  image: Annotated[UploadFile, File()], mode: Annotated[str, Form()] = "rag",
                  k: Annotated[int, Form()] = 5):
    svc = request.app.state.service
    k = _check_mode(mode, k, svc.settings.k_max)
    data, picture = await svc.decodes.read(image, "image: send the image to caption")
    start = time.perf_counter()
    ans = await run_in_threadpool(svc.engine.generate, "caption", image=picture, data=data,
                                  mode=mode, k=k, selection=selection)
    # Generator output is untrusted text: a server could echo the credentials it was sent.
    return {"caption": redact(ans.output, svc.secrets), "mode": mode, "k": len(ans.examples),
            "examples": examples_json(ans.examples), "selection": selection_json(selection),
            "latency_s": round(time.perf_counter() - start, 4), "usage": ans.usage, "cost_usd": ans.cost_usd,
            "attempts": ans.attempts, "generator": ans.generator}


@router.post("/v1/generate-image", summary="Generate an image from text with examples")
async def generate_image(request: Request, selection: Annotated[Any, Depends(selection_of_form)],
                         text: Annotated[str, Form()], mode: Annotated[str, Form()] = "rag",
                         k: Annotated[int, Form()] = 1):
    svc = request.app.state.service
    if mode in MODES and not text.strip():  # an unknown mode is _check_mode's to name
        raise HTTPException(400, "text: describe the image to generate")
    k = _check_mode(mode, k, svc.settings.k_max)
    start = time.perf_counter()
    ans = await run_in_threadpool(svc.engine.generate, "image", text=text, mode=mode, k=k, selection=selection)
    from unirag.data.images import png_bytes

    width, height = ans.output.size
    return {"image": "data:image/png;base64," + base64.b64encode(png_bytes(ans.output)).decode("ascii"),
            "width": width, "height": height, "examples": examples_json(ans.examples),
            "selection": selection_json(selection), "latency_s": round(time.perf_counter() - start, 4),
            "attempts": ans.attempts, "generator": ans.generator}
