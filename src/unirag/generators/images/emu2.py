"""``emu2-gen:<dir or hub id>``: Emu2-Gen (BAAI), the paper's second image generator, through its own pipeline.

Emu2-Gen ships as a diffusers *custom pipeline* (``pipeline_emu2_gen.py`` in the checkpoint, loaded with
``custom_pipeline="pipeline_emu2_gen"`` and ``trust_remote_code``) whose call takes one interleaved list
of images and texts::

    pipe(inputs=[text_1, image_1, ..., text_k, image_k, caption], height=, width=,
         num_inference_steps=, guidance_scale=) -> output.image

In-context examples are given exactly as UniRAG's code does (castorini/UniRAG
``src/unirag/image_generation_inference.py`` at commit 916425f8, lines 131-137): for each retrieved pair
its caption, then its image, then the query caption. The pipeline draws its noise from torch's global generator (it takes no ``generator``), so the
request's seed is set there before each call (``reseed=False``, the official run: never). The paper ran the ``bf16`` variant with the pipeline's
defaults (50 steps, guidance 3.0: pass ``--steps 50 --guidance 3``); out of memory at k=5 it kept the
first four pairs, which the shared local-model loop does (``meta["examples_used"]``).

Loading follows Emu2's README (baaivision/Emu ``Emu2/README.md`` at commit 0e642ce1, "Emu2-Gen", lines
339-356) and UniRAG's ``infer_emu2`` (lines 107-124): the multimodal encoder (``<dir>/multimodal_encoder``, ``AutoModelForCausalLM`` with
``trust_remote_code``, bf16 safetensors) and the tokenizer (``<dir>/tokenizer``) are loaded first and
passed to ``DiffusionPipeline.from_pretrained(dir, custom_pipeline="pipeline_emu2_gen",
multimodal_encoder=..., tokenizer=...)``: diffusers cannot build that remote-code encoder from the
folder on its own. A hub id is read from the local Hugging Face cache (download the repository first,
as the README says); a folder without those two sub-folders is a ConfigError naming them.

A user installs ``diffusers``, ``transformers`` and ``torchvision`` (the custom pipeline imports it) and
downloads ``BAAI/Emu2-Gen`` (about 37B parameters; ~80 GB of GPU memory in bf16, or CPU offload).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unirag.errors import ConfigError
from unirag.generators.images.base import ImageRequest
from unirag.generators.images.diffusers_backend import DiffusersImageGenerator, LocalImageGenerator

CUSTOM_PIPELINE = "pipeline_emu2_gen"
#: Sub-folders of an Emu2-Gen checkpoint loaded before the pipeline and passed to it (Emu2's README).
COMPONENTS = ("multimodal_encoder", "tokenizer")
#: The parameters of EmuVisualGenerationPipeline.__call__ unirag passes.
CALL_PARAMS = ("inputs", "height", "width", "num_inference_steps", "guidance_scale")


class Emu2GenImageGenerator(DiffusersImageGenerator):
    """Emu2-Gen's own pipeline: zero-shot and few-shot with interleaved example pairs."""

    templates = ()  # no prompt template: captions and images go in as they are
    prompt_text = LocalImageGenerator.prompt_text  # not the OmniGen placeholders of DiffusersImageGenerator

    def __init__(self, model: str, *, spec: str | None = None, device: str | None = "auto",
                 dtype: str | None = "auto", pipeline: Any = None, oom_fallback: bool = True,
                 offload: str | None = None, variant: str | None = None, reseed: bool = True) -> None:
        """``variant``: weight-file variant to load (default "bf16" when the checkpoint has such files).
        ``reseed``: seed torch's generator with the request's seed before every call (False: never, as the
        official run: ``image_seeding = official``)."""
        self.variant = variant
        self.reseed = bool(reseed)
        super().__init__(model, spec=spec or f"emu2-gen:{model}", device=device, dtype=dtype, pipeline=pipeline,
                         oom_fallback=oom_fallback, offload=offload)
        missing = [p for p in CALL_PARAMS if p not in self._call_params]
        if missing:
            raise ConfigError(f"{type(self._pipe).__name__} is not Emu2-Gen's pipeline: its __call__ lacks "
                              f"{', '.join(missing)} (expected {CUSTOM_PIPELINE}.EmuVisualGenerationPipeline)")
        self.label = f"Emu2-Gen {model}"
        self.style = "emu2-interleaved"
        self.max_examples = None

    def _load(self, torch_dtype: Any) -> Any:
        """The encoder and tokenizer, then the pipeline, as Emu2's README loads them (module docstring)."""
        from diffusers import DiffusionPipeline
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from unirag.runtime import (
            check_model_spec,
            diffusers_dtype_kwargs,
            hf_from_pretrained,
        )

        folder = check_model_spec(self.model)
        if not Path(folder).is_dir():  # a hub id: its snapshot in the local cache
            try:
                from huggingface_hub import snapshot_download

                folder = snapshot_download(folder, local_files_only=True)
            except Exception as e:  # noqa: BLE001 - hub errors have many types; all mean "not in the cache"
                raise ConfigError(f"Emu2-Gen {folder!r} is not in the local Hugging Face cache "
                                  f"({type(e).__name__}); download the repository to a folder first (as "
                                  "Emu2's README says) and pass that folder") from None
        folder = Path(folder)
        variant = self.variant
        if variant is None and any(folder.rglob("*.bf16.safetensors")):
            variant = "bf16"
        missing = [c for c in COMPONENTS if not (folder / c).is_dir()]
        if missing:
            raise ConfigError(f"{folder} is not an Emu2-Gen checkpoint: no {' or '.join(missing)} sub-folder "
                              f"(Emu2-Gen loads {' and '.join(COMPONENTS)} from there)")
        weights: dict[str, Any] = {"use_safetensors": True, "variant": variant} if variant else {}
        encoder = hf_from_pretrained(AutoModelForCausalLM, str(folder / "multimodal_encoder"),
                                     "Emu2-Gen multimodal encoder", trust_remote_code=True,
                                     dtype=torch_dtype, **weights)
        tokenizer = hf_from_pretrained(AutoTokenizer, str(folder / "tokenizer"), "Emu2-Gen tokenizer")
        try:
            return hf_from_pretrained(DiffusionPipeline, str(folder), "Emu2-Gen pipeline",
                                      **diffusers_dtype_kwargs(torch_dtype), custom_pipeline=CUSTOM_PIPELINE,
                                      trust_remote_code=True, multimodal_encoder=encoder, tokenizer=tokenizer,
                                      **weights)
        except (ImportError, NameError) as e:
            raise ConfigError(f"cannot build Emu2-Gen from {self.model!r}: {e} (its custom pipeline imports "
                              "torchvision; pip install torchvision)") from None

    def _render(self, request: ImageRequest, images: list[Any]) -> tuple[Any, dict[str, Any]]:
        if self.reseed:  # before every try, torch's global generators (the pipeline takes no ``generator``)
            import torch

            torch.manual_seed(int(request.seed))
        inputs: list[Any] = []  # [caption_1, image_1, ..., caption_k, image_k, query caption]: UniRAG's
        for example, image in zip(request.examples, images, strict=True):
            inputs += [example.caption, image]
        out = self._pipe(inputs=[*inputs, request.caption], height=request.height, width=request.width,
                         num_inference_steps=request.steps, guidance_scale=request.guidance)
        image = getattr(out, "image", None) or out.images[0]
        return image, {"prompt": self.prompt_text(request), "pipeline": type(self._pipe).__name__}

    def config(self) -> dict[str, Any]:
        return {**super().config(), "backend": "emu2-gen", "variant": self.variant,
                "seeding": "per-call" if self.reseed else "never"}
