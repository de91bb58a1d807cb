"""Hugging Face backend: any CLIP-family dual encoder (CLIP, SigLIP, ...) from a hub id or a local directory.

``AutoModel`` + ``AutoProcessor`` and the model's own ``get_text_features`` / ``get_image_features``, so
every checkpoint with that interface works without a per-architecture class; weights load directly in
the target precision (and, with ``accelerate``, onto the device).

A CLIP image processor configured as OpenAI's transform runs as OpenAI's
(:class:`unirag.encoders.preprocess.OpenAIClipTransform`), because Hugging Face's floors the centre-crop
offset that OpenAI's and OpenCLIP's training transforms round; CLIP texts get OpenAI's clean-up
(:func:`unirag.encoders.preprocess.clean_clip_text`), which Hugging Face's CLIP tokenizers leave out.
Both choices are part of :meth:`HFClipEncoder.identity`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from unirag.encoders.base import Encoder
from unirag.encoders.preprocess import CLIP_TEXT_CLEANING, clean_clip_text, openai_transform_for
from unirag.errors import ConfigError
from unirag.runtime import (
    check_model_spec,
    device_map_kwargs,
    hf_from_pretrained,
    host_to_device,
    weights_identity,
)


@dataclass(frozen=True)
class HFProcessorTransform:
    """A Hugging Face image processor as an image transform (see :mod:`unirag.encoders.preprocess`)."""

    processor: Any

    def single(self, image: Any) -> np.ndarray:
        """One RGB PIL image's ``pixel_values`` row (float32 CHW): a picklable preprocessor for the decode
        workers (processors treat each image of a batch independently, so stacking the rows gives the batch's
        pixels)."""
        return self.processor(images=[image], return_tensors="np")["pixel_values"][0]

    def identity(self) -> dict[str, Any]:
        return {"kind": "hf-processor", "class": type(self.processor).__name__}


def _features(out) -> Any:
    """Projected embeddings from ``get_*_features`` (a tensor in transformers 4, an output object in 5)."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    for attr in ("pooler_output", "text_embeds", "image_embeds"):
        value = getattr(out, attr, None)
        if isinstance(value, torch.Tensor):
            return value
    raise ConfigError(f"cannot find projected features in model output of type {type(out).__name__}")


class HFClipEncoder(Encoder):
    """A CLIP-family checkpoint as an :class:`Encoder`.

    ``spec`` is a hub id (``openai/clip-vit-base-patch32``, ``google/siglip-base-patch16-224``) or a
    directory written by ``save_pretrained``. ``device``/``dtype`` "auto": the GPU if there is one, in
    bfloat16 (float16 on GPUs without it); float32 on CPU. float16 needs a GPU; bfloat16 works on CPU.
    """

    def __init__(self, spec: str, *, device: str | None = "auto", dtype: str | None = "auto") -> None:
        from transformers import AutoModel, AutoProcessor

        self.spec = self.name = check_model_spec(spec)
        self._place(device, dtype)
        load_kwargs = {"dtype": self.torch_dtype, **device_map_kwargs(self.device)}
        model = hf_from_pretrained(AutoModel, self.spec, "CLIP-family model", **load_kwargs)
        if not (hasattr(model, "get_text_features") and hasattr(model, "get_image_features")):
            raise ConfigError(
                f"{spec!r} is a {type(model).__name__}, not a CLIP-family dual encoder "
                "(it has no get_text_features/get_image_features)"
            )
        processor = hf_from_pretrained(AutoProcessor, self.spec, "processor")
        image_processor = getattr(processor, "image_processor", processor)
        # A CLIP processor set up as OpenAI's transform runs as OpenAI's (rounded crop offset); others as they are.
        transform = openai_transform_for(image_processor) or HFProcessorTransform(image_processor)
        self._setup(model, processor, transform)

    def _setup(self, model, processor, image_transform: Any) -> None:
        """Shared by every way of building the model (a checkpoint directory, converted UniIR weights).

        ``image_transform``: what the images go through (see :mod:`unirag.encoders.preprocess`):
        OpenAI's transform for an OpenAI CLIP layout, else the checkpoint's own image processor."""
        self.model = model.eval().to(self.device, dtype=self.torch_dtype)
        self.processor = processor
        self.image_transform = image_transform
        self.model_type = str(getattr(model.config, "model_type", type(model).__name__))
        # OpenAI's clean-up belongs to CLIP's BPE tokenizer (every OpenAI/OpenCLIP CLIP was trained with it).
        self.text_cleaning = CLIP_TEXT_CLEANING if self.model_type == "clip" else None
        # SigLIP was trained on texts padded to a fixed length; CLIP on dynamically padded ones.
        self.text_padding = "max_length" if "siglip" in self.model_type else True
        text_cfg = getattr(model.config, "text_config", None)
        self.max_text_length = int(getattr(text_cfg, "max_position_embeddings", 77) or 77)
        dim = getattr(model.config, "projection_dim", None)
        self.dim = dim if isinstance(dim, int) and dim > 0 else int(self._embed_texts(["a"]).shape[-1])

    def identity(self) -> dict[str, Any]:
        base = {k: v for k, v in super().identity().items() if k != "name"}  # the name is a path or hub id
        return {
            **base,
            "backend": "hf-clip",
            "weights": weights_identity(self.spec, self.model),  # a local checkpoint's hash, or hub id + commit
            "model_type": self.model_type,
            "model_class": type(self.model).__name__,
            "text_padding": self.text_padding,
            "max_text_length": self.max_text_length,
            "text_cleaning": self.text_cleaning,
            "image_preprocess": self.image_transform.identity(),
        }

    def config(self) -> dict[str, Any]:
        return {**super().config(), "model": self.spec}

    def tokenize(self, texts: Sequence[str]):
        """The text tower's input for ``texts`` (token ids and attention mask, as tensors on CPU): cleaned
        as the model family's official tokenizer does (see the module docstring), truncated, padded."""
        if self.text_cleaning is not None:
            texts = [clean_clip_text(t) for t in texts]
        tok = getattr(self.processor, "tokenizer", self.processor)
        return tok(list(texts), padding=self.text_padding, truncation=True, max_length=self.max_text_length,
                   return_tensors="pt")

    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        batch = self.tokenize(texts).to(self.device)  # token ids stay integers
        with torch.inference_mode(), self._autocast():
            feats = _features(self.model.get_text_features(**batch))
        return feats.float().cpu().numpy()

    def _embed_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        import torch

        pixels = host_to_device(batch, self.device, self.torch_dtype)
        with torch.inference_mode(), self._autocast():
            feats = _features(self.model.get_image_features(pixel_values=pixels))
        return feats.float().cpu().numpy()
