"""Pick an encoder by name: the offline default, or any CLIP-family checkpoint by hub id / local path.

Cheap to import (no torch, no transformers): the CLI imports it to validate options before any model
loads.
"""

from __future__ import annotations

from unirag.encoders.base import Encoder

#: Names that select the bundled offline encoder (MiniLM texts + EfficientNet-Lite0 images, see offline.py).
OFFLINE_NAMES = frozenset({"offline", "default", "offline-default"})
#: Names that select the default sentence-embedding model for text–text similarity.
DEFAULT_TEXT_NAMES = frozenset({"default", "minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"})


def is_offline_name(spec: str | None) -> bool:
    return spec is None or spec.strip().lower() in OFFLINE_NAMES


def load_encoder(spec: str | None = None, *, device: str | None = "auto", dtype: str | None = "auto",
                 batch_size: int | None = None) -> Encoder:
    """Return the encoder ``spec`` names (public as ``unirag.load_encoder``).

    ``device``: "auto" (CUDA when available, else CPU), "cpu", "cuda", "cuda:1", ...;
    ``dtype``: "auto", "float32", "float16" or "bfloat16" (the offline encoder is float32 only).

    ``None``, ``"offline"`` or ``"default"``: the offline joint encoder shipped with the package.
    Anything else: a Hugging Face hub id or a local checkpoint directory, loaded by the CLIP-family
    backend. Raises :class:`unirag.errors.ConfigError` naming ``spec`` when it cannot be loaded.
    """
    if is_offline_name(spec):
        from unirag.encoders.offline import OfflineEncoder

        if dtype not in (None, "auto", "float32", "fp32"):
            from unirag.errors import ConfigError

            raise ConfigError(f"the offline encoder runs in float32 only (got dtype={dtype!r})")
        return OfflineEncoder(device=device or "auto", batch_size=batch_size)
    from unirag.encoders._runtime import check_model_spec
    from unirag.encoders.hf_clip import HFClipEncoder

    return HFClipEncoder(check_model_spec(spec), device=device, dtype=dtype, batch_size=batch_size)


def load_text_encoder(spec: str | None = None, *, device: str | None = "cpu",
                      batch_size: int | None = None) -> Encoder:
    """Sentence embeddings for text–text similarity (all-MiniLM-L6-v2 from its PyPI wheel by default).

    ``spec`` may be a hub id or local directory of any mean-pooled sentence-transformers model. The
    returned encoder refuses ``encode_images`` with a ConfigError.
    """
    from unirag.encoders.text import SentenceTextEncoder

    if spec is None or spec.strip().lower() in DEFAULT_TEXT_NAMES:
        return SentenceTextEncoder(None, device=device or "cpu", batch_size=batch_size)
    from unirag.encoders._runtime import check_model_spec

    return SentenceTextEncoder(check_model_spec(spec), device=device or "cpu", batch_size=batch_size)
