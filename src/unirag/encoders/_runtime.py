"""Torch plumbing every local backend shares: thread count, device/dtype choice, image decoding.

Kept in one place so the HF backend and the offline encoder behave the same way (one decode per
image, the same clear errors, no CPU oversubscription when several workers run side by side).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from unirag.errors import ConfigError

_THREADS_SET = False


def configure_torch_threads() -> None:
    """Cap torch's intra-op threads once per process.

    ``UNIRAG_TORCH_THREADS`` wins; otherwise ``OMP_NUM_THREADS``; otherwise the CPUs this process may
    use. torch's own default counts every core of the machine, which oversubscribes containers and
    runs that share a host.
    """
    global _THREADS_SET
    if _THREADS_SET:
        return
    import torch

    wanted = os.environ.get("UNIRAG_TORCH_THREADS") or os.environ.get("OMP_NUM_THREADS")
    try:
        n = int(wanted) if wanted else len(os.sched_getaffinity(0))
    except (ValueError, AttributeError):
        n = os.cpu_count() or 1
    torch.set_num_threads(max(1, n))
    _THREADS_SET = True


def resolve_device(device: str | None) -> str:
    """``None``/"auto" -> cuda when available else cpu; anything else must be a device torch knows."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"unknown torch device {device!r} ({e})") from None
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available on this machine")
    return str(device)


def resolve_dtype(dtype: str | None, device: str):
    """Map "float32"/"float16"/"bfloat16" (or None -> float32) to a torch dtype."""
    import torch

    if dtype in (None, "auto"):
        return torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in table:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of float32, float16, bfloat16")
    if table[dtype] is torch.float16 and device == "cpu":
        raise ConfigError("float16 is not supported for CPU inference; use float32 or bfloat16")
    return table[dtype]


def to_pil_images(images: Sequence[Any]) -> list:
    """Decode each input once: PIL images pass through (converted to RGB), paths go through ``load_rgb``.

    A missing or corrupt file raises :class:`unirag.errors.InputError` naming the file.
    """
    from PIL import Image

    from unirag.data.images import load_rgb

    out = []
    for im in images:
        if isinstance(im, Image.Image):
            out.append(im if im.mode == "RGB" else im.convert("RGB"))
        else:
            out.append(load_rgb(im))
    return out


def _offline_mode() -> bool:
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""),
             os.environ.get("UNIRAG_OFFLINE", ""))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


def check_model_spec(spec: str) -> str:
    """Return ``spec`` if it is an existing local directory or a well-formed hub id, else ConfigError.

    Something that looks like a filesystem path (``/x``, ``./x``, ``~/x``, ``C:\\x``) must exist; a
    hub id is ``name`` or ``org/name``.
    """
    import re
    from pathlib import Path

    p = Path(spec).expanduser()
    if p.is_dir():
        return str(p.resolve())  # absolute, so index manifests name the same model from any directory
    looks_like_path = spec.startswith((".", "/", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", spec) or p.exists()
    if looks_like_path:
        what = "is a file, not a model directory" if p.exists() else "does not exist"
        raise ConfigError(f"model path {spec!r} {what}")
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", spec):
        raise ConfigError(f"{spec!r} is neither an existing model directory nor a Hugging Face hub id (org/name)")
    return spec


def hf_from_pretrained(loader, spec: str, what: str, **kwargs):
    """``loader.from_pretrained(spec)`` with failures turned into a ConfigError that names ``spec``.

    A hub id is looked up in the local cache first; only if it is missing there (and offline mode,
    ``HF_HUB_OFFLINE``/``UNIRAG_OFFLINE``, is off) is a download attempted.
    """
    from pathlib import Path

    local = Path(spec).is_dir()
    try:
        return loader.from_pretrained(spec, local_files_only=True, **kwargs)
    except (OSError, ValueError, KeyError) as first:
        if local or _offline_mode():
            where = "local directory" if local else "Hugging Face hub cache (offline mode: no download attempted)"
            raise ConfigError(f"cannot load {what} from {where} {spec!r}: {first}") from None
    try:
        return loader.from_pretrained(spec, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(
            f"cannot load {what} {spec!r}: not in the local Hugging Face cache and it could not be downloaded "
            f"(no network, or no such repository). Pass a local checkpoint directory instead. ({e})"
        ) from None
