"""Pick an encoder by name (see :func:`load_encoder`). Cheap to import (no torch, no transformers): the
CLI imports it to validate options before any model loads."""

from __future__ import annotations

from typing import Any

from unirag.encoders.base import Encoder
from unirag.encoders.plugin import PluginEncoder, is_plugin_spec
from unirag.errors import ConfigError
from unirag.runtime import check_model_spec, decode_setting

#: Names that select the bundled offline encoder (MiniLM texts + EfficientNet-Lite0 images, see offline.py).
OFFLINE_NAMES = frozenset({"offline", "default", "offline-default"})
#: Names that select the default sentence-embedding model for text–text similarity.
DEFAULT_TEXT_NAMES = frozenset({"default", "minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"})


def is_offline_name(spec: str | None) -> bool:
    return spec is None or spec.strip().lower() in OFFLINE_NAMES


def is_uniir_spec(spec: str | None) -> bool:
    """``uniir:...``: a UniIR checkpoint, whose queries take M-BEIR instructions."""
    return spec is not None and spec.strip().lower().startswith("uniir:")


def precision_options(spec: str | None, dtype: str | None, settings: Any = None) -> dict[str, Any]:
    """``dtype`` (and ``autocast``) for ``load_encoder`` under the ``uniir_precision`` setting: a UniIR spec with
    ``dtype`` auto under ``official`` loads float32 weights run under float16 autocast, as UniIR embeds."""
    from unirag.profiles import resolve

    if is_uniir_spec(spec) and dtype in (None, "auto") \
            and resolve(settings)["uniir_precision"] == "official":
        return {"dtype": "float32", "autocast": "float16"}
    return {"dtype": dtype}


def load_encoder(spec: str | None = None, *, device: str | None = "auto", dtype: str | None = "auto",
                 batch_size: int | None = None, instructions: str | None = None,
                 use_instructions: bool | None = None, decode_workers: int | str | None = None,
                 autocast: str | None = None) -> Encoder:
    """Return the encoder ``spec`` names, on ``device`` in ``dtype``.

    ``None``, ``"offline"`` or ``"default"``: the offline joint encoder shipped with the package.
    ``uniir:clip_sf:PATH`` / ``uniir:blip_ff:PATH`` (``:large:`` or ``:base:`` before the path checks
    the variant): a UniIR CLIP-SF or BLIP-FF checkpoint file; M-BEIR
    query instructions are prepended to queries unless ``use_instructions=False`` (``instructions`` = a
    ``query_instructions.tsv``; default: the packaged M-BEIR one).
    ``python:MODULE:FACTORY``: the encoder a function of yours returns (:mod:`unirag.encoders.plugin`).
    Anything else: a Hugging Face hub id or a local checkpoint directory, loaded by the CLIP-family
    backend.

    ``decode_workers``: processes that decode and preprocess image files ahead of the model
    (:mod:`unirag.data.loader`): None or "auto" = the cores available (at most 8; small jobs
    inline), 0 = inline. It never changes the vectors.

    ``device``: "auto" (CUDA, else MPS, else CPU), "cpu", "cuda", "cuda:N", "mps". ``dtype``: "auto"
    (bfloat16/float16 on a GPU, float32 on CPU), "float32", "float16", "bfloat16". Neither changes the
    encoder's fingerprint. ``autocast="float16"``: the forward passes run under float16 autocast on CUDA
    (UniIR's ``use_fp16``; see :func:`precision_options`). Raises :class:`unirag.errors.ConfigError` naming
    ``spec`` when it cannot be loaded.
    """
    workers = decode_setting(decode_workers)
    if autocast not in (None, "float16"):  # precision_options: float32 weights under float16 autocast (CUDA only)
        raise ConfigError(f"autocast must be float16 (UniIR's use_fp16), got {autocast!r}")
    if (instructions is not None or use_instructions) and not (is_offline_name(spec) or is_uniir_spec(spec)):
        raise ConfigError(f"query instructions are for UniIR encoders (uniir:...); {spec!r} was not trained with them")
    if is_uniir_spec(spec):
        from unirag.encoders.uniir import UniIRBlipFFEncoder, UniIRClipSFEncoder

        # the spec is checked as the encoder opens it
        cls = UniIRBlipFFEncoder if spec.strip().split(":")[1].lower() == "blip_ff" else UniIRClipSFEncoder
        encoder = cls(spec, device=device, dtype=dtype, instructions=instructions, use_instructions=use_instructions)
    elif is_plugin_spec(spec):
        encoder = PluginEncoder(spec, device=device, dtype=dtype, batch_size=batch_size)
    elif is_offline_name(spec):
        from unirag.encoders.offline import OfflineEncoder

        if dtype not in (None, "auto", "float32", "fp32"):
            raise ConfigError(f"the offline encoder runs in float32 only (got dtype={dtype!r})")
        encoder = OfflineEncoder(device=device)
    else:
        from unirag.encoders.hf_clip import HFClipEncoder

        encoder = HFClipEncoder(spec, device=device, dtype=dtype)
    encoder.decode_workers, encoder.autocast_dtype = workers, autocast
    encoder.batch_size = batch_size or encoder.batch_size
    return encoder


def load_text_encoder(spec: str | None = None, *, device: str | None = "auto",
                      batch_size: int | None = None) -> Encoder:
    """Sentence embeddings for text–text similarity (all-MiniLM-L6-v2 from its PyPI wheel by default).

    ``spec`` may be a hub id or local directory of any mean-pooled sentence-transformers model. The
    returned encoder refuses ``encode_images`` with a ConfigError.
    """
    from unirag.encoders.text import SentenceTextEncoder

    default = spec is None or spec.strip().lower() in DEFAULT_TEXT_NAMES
    return SentenceTextEncoder(None if default else check_model_spec(spec), device=device, batch_size=batch_size)
