"""``lavit:<checkpoint dir>``: LaVIT (Jin et al.), the paper's first image generator, through its own code.

LaVIT is not a pip package: its repository (github.com/jy0205/LaVIT) has a top-level ``models`` package
whose ``build_model(model_path, model_dtype, ..., understanding=False, load_tokenizer=True)`` returns a
``LaVITforGeneration`` with ``multimodal_synthesis(prompts, width, height, ...)``. unirag imports that
package (``module="models"``, with ``code_dir`` = the repository checkout put on ``sys.path``) and calls it
as UniRAG's code does (castorini/UniRAG ``src/unirag/image_generation_inference.py`` at commit 916425f8:
``build_model`` lines 37-45, the prompts lines 62-65, the call lines 70-78)::

    model.multimodal_synthesis([(caption_1, "text"), (image_path_1, "image"), ..., (caption, "text")],
                               width=1024, height=1024, guidance_scale_for_llm=4.0,
                               num_return_images=1, num_inference_steps=25, top_k=50)

under bf16 autocast. As UniRAG's ``build_lavit_model`` does, the seed (1234 unless ``seed=`` says
otherwise) is set once, in torch's, numpy's and Python's global generators, when the model is built,
and never again: LaVIT samples its visual tokens and diffusion noise from torch's global generator, so
a query's picture depends on the queries rendered before it in the same process, exactly as in the
official run (the request's own ``seed`` is not used). ``use_xformers`` defaults to "when the
``xformers`` package is installed" (the official script passes ``use_xformers=True``). Precision:
LaVIT's ``build_model`` knows ``model_dtype`` "bf16" and "fp16" only (anything else silently loads
fp16), so "auto" means bf16 (the official choice) on any device and float32 is refused.
Width/height/steps/guidance come from the request (the paper's LaVIT settings are unirag's image
defaults).

LaVIT's ``multimodal_synthesis`` takes example images as *paths* and opens them itself
(``Image.open(path).convert("RGB")`` in ``LaVIT/models/lavit_for_generation.py``; a PIL image is not
accepted), so the path is what it gets, as in the official run; the decoded copy unirag makes (ahead,
in decode workers, during an image run: :func:`unirag.data.loader.ahead`) serves only the up-front check that
the file reads, and LaVIT decodes the file once more in the model's process.

A user installs LaVIT's requirements (its ``requirements.txt``: torch, transformers, diffusers, xformers
optional, torchvision, ...), clones the repository, downloads ``rain1011/LaVIT-7B-v2`` and runs
``--generator lavit:/path/to/LaVIT-7B-v2 --lavit-code /path/to/LaVIT``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from unirag.errors import ConfigError
from unirag.generators.images.base import ImageRequest
from unirag.generators.images.diffusers_backend import LocalImageGenerator
from unirag.runtime import dtype_name, resolve_device

#: ``multimodal_synthesis`` parameters unirag passes (checked when the model is built).
SYNTHESIS_PARAMS = ("width", "height", "guidance_scale_for_llm", "num_return_images", "num_inference_steps", "top_k")
#: unirag precision name -> LaVIT's ``model_dtype`` (``build_model`` knows no other; see the module docstring).
LAVIT_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
#: The seed UniRAG's ``build_lavit_model`` sets once before building LaVIT.
LAVIT_SEED = 1234


def xformers_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("xformers") is not None


def seed_everything(seed: int) -> None:
    """torch (CPU and GPUs), numpy and Python global generators, as UniRAG seeds them before LaVIT."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(int(seed))  # every device's
    np.random.seed(int(seed))
    random.seed(int(seed))


class LaVITImageGenerator(LocalImageGenerator):
    """LaVIT-7B-v2 text-to-image, zero-shot or with interleaved example pairs."""

    def __init__(self, model_path: str, *, spec: str | None = None, device: str | None = "auto",
                 dtype: str | None = "auto", lavit_module: str = "models", lavit_code: str | None = None,
                 use_xformers: bool | None = None, check_safety: bool = False, top_k: int = 50,
                 oom_fallback: bool = True, seed: int | None = LAVIT_SEED, model: Any = None,
                 reseed_every: int | None = None) -> None:
        """``model``: an already built LaVIT generation model (programmatic use); else it is built from
        ``model_path`` with LaVIT's ``build_model`` (local files only: no download). ``seed``: set once,
        before building (None: leave the global generators alone); ``reseed_every``: set again before every
        N-th call (the official run: 1000, one process per 1,000 queries). ``use_xformers``: None = when installed."""
        self.model_path = model_path
        self.spec = spec or f"lavit:{model_path}"
        self.label = f"LaVIT {model_path}"
        self.device = resolve_device(device)
        self.dtype = "bfloat16" if dtype in (None, "", "auto") else dtype_name(dtype, self.device)
        if self.dtype not in LAVIT_DTYPES:
            raise ConfigError(f"LaVIT runs in bfloat16 or float16 only (its build_model's model_dtype is "
                              f"{' or '.join(repr(v) for v in LAVIT_DTYPES.values())}); got dtype {dtype!r}")
        self.top_k = int(top_k)
        self.oom_fallback = bool(oom_fallback)
        self.seed = None if seed is None else int(seed)
        self.reseed_every = None if not reseed_every else int(reseed_every)
        self.seeding = f"every-{self.reseed_every}-calls" if self.reseed_every else "once-at-build"
        self._calls = 0
        self.use_xformers = xformers_available() if use_xformers is None else bool(use_xformers)
        if self.seed is not None:
            seed_everything(self.seed)
        if model is None:
            if not Path(model_path).expanduser().is_dir():
                raise ConfigError(f"LaVIT checkpoint folder {model_path!r} does not exist")
            if lavit_code is not None:  # the LaVIT checkout, put on sys.path for its ``models`` package
                code = Path(lavit_code).expanduser().resolve()
                if not code.is_dir():
                    raise ConfigError(f"LaVIT code folder {str(code)!r} does not exist (lavit_code)")
                if str(code) not in sys.path:
                    sys.path.insert(0, str(code))
            try:
                lavit = importlib.import_module(lavit_module)
            except ImportError as e:
                raise ConfigError(f"cannot import LaVIT's {lavit_module!r} package ({e}); clone "
                                  "github.com/jy0205/LaVIT, install its requirements and pass its folder as "
                                  "lavit_code (--lavit-code)") from None
            if not callable(getattr(lavit, "build_model", None)):
                raise ConfigError(f"module {lavit_module!r} ({getattr(lavit, '__file__', '?')}) has no "
                                  "build_model(); is it LaVIT's?")
            model = lavit.build_model(model_path=str(Path(model_path).expanduser()), model_dtype=LAVIT_DTYPES[self.dtype],
                                      use_xformers=self.use_xformers, understanding=False, load_tokenizer=True,
                                      check_safety=check_safety, local_files_only=True)
            if hasattr(model, "to"):
                model = model.to(self.device)
        params = inspect.signature(model.multimodal_synthesis).parameters
        missing = [p for p in ("prompts", *SYNTHESIS_PARAMS) if p not in params]
        if missing:
            raise ConfigError(f"{type(model).__name__}.multimodal_synthesis lacks {', '.join(missing)}: not LaVIT's "
                              "generation model (build it with understanding=False, load_tokenizer=True)")
        self._pipe = model

    def generate(self, request: ImageRequest):
        # No per-call seed: the generators were seeded when the model was built (module docstring), and
        # with reseed_every again before the first call of every batch of that many, as the official run.
        if self.reseed_every and self.seed is not None and self._calls and self._calls % self.reseed_every == 0:
            seed_everything(self.seed)
        self._calls += 1
        return super().generate(request)

    def _render(self, request: ImageRequest, images: list[Any]) -> tuple[Any, dict[str, Any]]:
        import torch

        # [(caption_1, "text"), (image_1, "image"), ..., (query caption, "text")]: UniRAG's order
        prompts = [p for e in request.examples for p in ((e.caption, "text"), (str(e.image), "image"))]
        with torch.autocast(device_type=self.device.split(":")[0], dtype=getattr(torch, self.dtype)):
            out = self._pipe.multimodal_synthesis(
                [*prompts, (request.caption, "text")], width=request.width, height=request.height,
                guidance_scale_for_llm=request.guidance, num_return_images=1,
                num_inference_steps=request.steps, top_k=self.top_k)
        return out[0], {"prompt": self.prompt_text(request), "model": type(self._pipe).__name__}

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "backend": "lavit", "model": self.model_path, "device": self.device,
                "dtype": self.dtype, "top_k": self.top_k, "seed": self.seed, "seeding": self.seeding,
                "use_xformers": self.use_xformers}

    def identity(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "top_k": self.top_k, "oom_fallback": self.oom_fallback, "seed": self.seed,
                "seeding": self.seeding}
