"""``diffusers:<hub id or local dir>``: local text-to-image pipelines, zero-shot or with reference images.

Any pipeline ``DiffusionPipeline.from_pretrained`` can load is accepted. What it can do decides
the modes it serves: a text-only pipeline (Stable Diffusion, SDXL, FLUX, ...) serves zero-shot; a
pipeline whose call takes ``input_images`` with ``<img><|image_i|></img>`` placeholders in the
prompt (OmniGen) also serves few-shot, with the example pairs interleaved as the paper's
in-context examples. Asking a text-only pipeline for k > 0 is a ConfigError before any work.

Every query uses a fresh ``torch.Generator`` seeded with the request's seed, so the same query
gives the same pixels whether it runs first, last, or in a resumed run. Device and precision follow
:mod:`unirag.runtime`; ``offload="model"`` (or ``"sequential"``) keeps the pipeline's sub-models in CPU
memory and moves each to the GPU only while it runs (needs ``accelerate``), for GPUs smaller than the
pipeline.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

from unirag.errors import BackendError, ConfigError
from unirag.generators.images.base import (
    FEW_SHOT_OMNIGEN,
    ZERO_SHOT,
    GeneratedImage,
    ImageBackend,
    ImageRequest,
    render_listed,
)


class LocalImageGenerator(ImageBackend):
    """A model in this process (diffusers pipelines, Emu2-Gen, LaVIT) and the call loop they share.

    Example images are decoded once up front (a missing or corrupt file fails the query with a message
    naming it, before the model runs); the model renders under ``torch.inference_mode``; out of GPU
    memory with several examples, the last (least relevant) examples are dropped one at a time and the
    call is retried, as the paper did for Emu2-Gen at k=5 (``meta["examples_used"]`` records it).
    Subclasses set ``_pipe`` (the pipeline or model), ``device``, ``oom_fallback`` and ``label`` (what an
    error names) and implement ``_render(request, images) -> (image, meta)``: one model call for ``request``
    (examples as kept) with their decoded images.
    """

    local = True
    _pipe: Any = None

    def prompt_text(self, request: ImageRequest) -> str:
        """Each example's caption, then its image's file name; the query caption last (the order LaVIT and
        Emu2-Gen take them in)."""
        parts = []
        for e in request.examples:
            parts += [e.caption, f"<image {e.image.name}>"]
        return "\n".join([*parts, request.caption])

    def generate(self, request: ImageRequest) -> GeneratedImage:
        import torch

        from unirag.data.images import load_rgb
        from unirag.runtime import free_memory

        images_all = [load_rgb(e.image, ahead=request.ahead, loading=request.loading) for e in request.examples]
        used = len(request.examples)
        while True:
            trimmed = dataclasses.replace(request, examples=request.examples[:used])
            try:
                with torch.inference_mode():
                    image, meta = self._render(trimmed, images_all[:used])
                break
            except torch.OutOfMemoryError as e:
                free_memory()
                if self.oom_fallback and used > 1:
                    used -= 1
                    continue
                raise BackendError(f"{self.label}: out of memory for query {request.qid} ({request.width}x"
                                   f"{request.height}, {used} reference image(s)): {e}", kind="oom") from None
        meta = dict(meta)
        if used < len(request.examples):
            meta["examples_used"] = used
        return GeneratedImage(image=load_rgb(image), meta=meta)

    def close(self) -> None:
        """Drop the model and return its GPU memory."""
        from unirag.runtime import free_memory

        self._pipe = None
        free_memory(self.device)


# How a pipeline takes reference images, recognised from its __call__ signature.
STYLE_TEXT_ONLY = "text-only"
STYLE_INTERLEAVED = "interleaved-placeholders"  # OmniGen: prompt placeholders + input_images=[...]


def call_kwargs(call_params: set[str], request: ImageRequest, prompt: str, images: list[Any],
                generator: Any) -> tuple[dict[str, Any], list[str]]:
    """Keyword arguments for ``pipe(...)`` and the names of requested settings the pipeline lacks.

    Only parameters the pipeline declares are passed (pipelines differ: some have no guidance),
    and the dropped ones are reported so the run records what was really used.
    """
    wanted: dict[str, Any] = {"prompt": prompt, "height": request.height, "width": request.width,
                              "num_inference_steps": request.steps, "guidance_scale": request.guidance,
                              "generator": generator, "output_type": "pil"}
    if images:
        wanted["input_images"] = images
    kwargs = {k: v for k, v in wanted.items() if k in call_params}
    dropped = sorted(k for k in wanted if k not in call_params and k not in ("output_type",))
    if images and "input_images" not in kwargs:
        raise ConfigError("this pipeline does not accept reference images (no 'input_images' argument)")
    return kwargs, dropped


OFFLOAD_MODES = ("none", "model", "sequential")


class DiffusersImageGenerator(LocalImageGenerator):
    """A diffusers pipeline, one query at a time (the GPU is the bottleneck, not the loop)."""

    templates = (ZERO_SHOT, FEW_SHOT_OMNIGEN)

    def __init__(self, model: str, *, spec: str | None = None, device: str | None = "auto",
                 dtype: str | None = "auto", pipeline: Any = None, oom_fallback: bool = True,
                 offload: str | None = None) -> None:
        """``pipeline``: an already built pipeline object (programmatic use); otherwise ``model`` is loaded.
        ``oom_fallback``: on out-of-memory, retry with fewer examples instead of failing the query.
        ``offload``: "model" or "sequential" CPU offload onto the GPU (see the module docstring)."""
        from unirag.runtime import dtype_name, resolve_device, resolve_dtype

        self.model = model
        self.spec = spec or f"diffusers:{model}"
        self.label = f"diffusers {model}"
        self.device = resolve_device(device)
        self.dtype = dtype_name(dtype, self.device)
        self.offload = offload or "none"
        if self.offload not in OFFLOAD_MODES:
            raise ConfigError(f"unknown offload mode {offload!r}; use one of {', '.join(OFFLOAD_MODES)}")
        self.oom_fallback = bool(oom_fallback)
        self._pipe = pipeline if pipeline is not None else self._load(resolve_dtype(self.dtype, self.device))
        if self.offload == "none" or self.device == "cpu":
            if hasattr(self._pipe, "to"):
                self._pipe.to(self.device)
        else:  # CPU offload onto the GPU
            method = f"enable_{'model' if self.offload == 'model' else 'sequential'}_cpu_offload"
            try:
                getattr(self._pipe, method)(device=self.device)
            except (ImportError, AttributeError, ValueError, RuntimeError) as e:
                raise ConfigError(f"cannot enable {self.offload} CPU offload on {type(self._pipe).__name__} "
                                  f"({e}); it needs the accelerate package and a GPU") from None
        if hasattr(self._pipe, "set_progress_bar_config"):
            self._pipe.set_progress_bar_config(disable=True)
        self._call_params = set(inspect.signature(self._pipe.__call__).parameters)
        self.style = STYLE_INTERLEAVED if "input_images" in self._call_params else STYLE_TEXT_ONLY
        self.max_examples = 0 if self.style == STYLE_TEXT_ONLY else None

    def _load(self, torch_dtype: Any) -> Any:
        """Build the pipeline from ``self.model`` (subclasses add loading options, e.g. a custom pipeline)."""
        from diffusers import DiffusionPipeline

        from unirag.runtime import check_model_spec, diffusers_dtype_kwargs, hf_from_pretrained

        spec = check_model_spec(self.model)
        if Path(spec).is_dir() and not (Path(spec) / "model_index.json").is_file():
            raise ConfigError(f"{self.model} is not a diffusers pipeline directory (no model_index.json); "
                              "save one with pipeline.save_pretrained(DIR)")
        try:
            return hf_from_pretrained(DiffusionPipeline, spec, "diffusers pipeline",
                                      **diffusers_dtype_kwargs(torch_dtype))
        except (NameError, ImportError) as e:
            # diffusers leaves optional modules undefined when an extra (torchvision for OmniGen) is absent.
            raise ConfigError(f"cannot build diffusers pipeline {self.model!r}: {e}; this pipeline needs an "
                              "optional package that is not installed (OmniGen needs torchvision)") from None

    def _torch_generator(self, seed: int):
        import torch

        generator = torch.Generator(self.device if self.device.startswith("cuda") else "cpu")
        return generator.manual_seed(int(seed))

    def check_size(self, width: int, height: int) -> None:
        """Latents are the image divided by the VAE factor (and OmniGen packs them in 2x2 patches)."""
        super().check_size(width, height)
        factor = max(8, int(getattr(self._pipe, "vae_scale_factor", 8) or 8))
        multiple = factor * (2 if self.style == STYLE_INTERLEAVED else 1)
        if width % multiple or height % multiple:
            raise ConfigError(f"{type(self._pipe).__name__} needs width and height that are a multiple of {multiple}; "
                              f"got {width}x{height}")

    def prompt_text(self, request: ImageRequest) -> str:
        """OmniGen-style: each example's caption, then its ``<img><|image_i|></img>`` placeholder; the query
        caption last."""
        return render_listed(FEW_SHOT_OMNIGEN, request.caption, [e.caption for e in request.examples])

    def _render(self, request: ImageRequest, images: list[Any]) -> tuple[Any, dict[str, Any]]:
        """One pipeline call for ``request`` with its (already decoded) example images."""
        prompt = self.prompt_text(request)
        kwargs, dropped = call_kwargs(self._call_params, request, prompt, images, self._torch_generator(request.seed))
        out = self._pipe(**kwargs)
        image = out.images[0] if hasattr(out, "images") else out[0][0]
        meta: dict[str, Any] = {"prompt": prompt, "pipeline": type(self._pipe).__name__}
        if dropped:
            meta["ignored_settings"] = dropped
        return image, meta

    def generate_batch(self, requests: list[ImageRequest]) -> list[GeneratedImage]:
        """Several text-only requests of one size and setting in one pipeline call (one seeded generator
        each, so every picture depends only on its own request). Requests with examples, or of mixed
        settings, fall back to one call each."""
        import torch

        same = len({(r.width, r.height, r.steps, r.guidance) for r in requests}) == 1
        if len(requests) <= 1 or not same or any(r.examples for r in requests) or "generator" not in self._call_params:
            return [self.generate(r) for r in requests]
        first = requests[0]
        self.check_size(first.width, first.height)  # the same size for all
        kwargs, dropped = call_kwargs(self._call_params, first, "", [], [self._torch_generator(r.seed) for r in requests])
        kwargs["prompt"] = [r.caption for r in requests]
        try:
            with torch.inference_mode():
                out = self._pipe(**kwargs)
        except torch.OutOfMemoryError as e:
            raise BackendError(f"diffusers {self.model}: out of memory for a batch of {len(requests)} "
                               f"({first.width}x{first.height}); use a smaller batch: {e}", kind="oom") from None
        meta = {"pipeline": type(self._pipe).__name__, **({"ignored_settings": dropped} if dropped else {})}
        return [GeneratedImage(image=im.convert("RGB"), meta={"prompt": r.caption, **meta})
                for r, im in zip(requests, out.images, strict=True)]

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "backend": "diffusers", "model": self.model, "device": self.device,
                "dtype": self.dtype, "offload": self.offload, "pipeline": type(self._pipe).__name__,
                "reference_style": self.style}

    def identity(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "oom_fallback": self.oom_fallback}
