"""Torch runtime shared by every local model (encoders, VLMs, diffusers, LaVIT, Emu2): device, precision,
thread count, decode workers, checkpoint loading, and releasing GPU memory.

One place decides what ``device="auto"`` (CUDA, else MPS, else CPU) and ``dtype="auto"`` (bfloat16 on a
CUDA GPU that has it, else float16 on a GPU; float32 on CPU) mean, so every model given the same options
runs alike. Importing this module is cheap (torch is imported inside the functions).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Any

from unirag.errors import ConfigError

#: The values ``--dtype`` accepts.
DTYPE_CHOICES = ("auto", "float32", "float16", "bfloat16")

_DTYPE_ALIASES = {"float32": "float32", "fp32": "float32", "float": "float32", "float16": "float16",
                  "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}

#: ``auto`` decode workers (:func:`decode_processes`): the cores this process may run on, at most this many.
AUTO_WORKERS_CAP = 8
#: With ``auto``, fewer images than this are decoded inline: starting worker processes costs more.
AUTO_MIN_IMAGES = 128
#: With ``auto``, decode workers beside a model on this machine's CPU: its intra-op threads already use
#: every core; one worker overlaps the decoding (measured on 2 cores, docs/throughput.md).
AUTO_WORKERS_CPU_MODEL = 1


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def decode_setting(value: int | str | None) -> int | None:
    """The decode-workers setting as :func:`decode_processes` takes it: "auto"/None -> None, an integer
    >= 0 (as text too) -> itself; anything else is one :class:`~unirag.errors.ConfigError` line."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    number = int(value) if str(value).strip().lstrip("-").isdigit() else -1
    if number < 0:
        raise ConfigError(f"decode workers must be >= 0 (0 = decode inline) or 'auto', got {value!r}")
    return number


def decode_processes(setting: int | None, n_images: int | None = None, model_on_cpu: bool = False,
                     share: tuple[int, int] | None = None) -> int:
    """The decode workers (:mod:`unirag.data.loader`) for a job of ``n_images`` (None: unknown): ``setting``
    if given, else the one ``auto`` rule: small jobs inline, :data:`AUTO_WORKERS_CPU_MODEL` beside a model on
    this CPU, else the cores, capped; ``share=(cpus, actors)``: a Ray actor's share less one for itself."""
    if setting is not None:
        return setting
    if share is not None:
        cpus, actors = share
        return 0 if model_on_cpu else max(1, min(AUTO_WORKERS_CAP, cpus // max(1, actors) - 1))
    if n_images is not None and n_images < AUTO_MIN_IMAGES:
        return 0
    return AUTO_WORKERS_CPU_MODEL if model_on_cpu else min(available_cores(), AUTO_WORKERS_CAP)


@functools.cache
def configure_torch_threads() -> None:
    """Cap torch's intra-op threads once per process: ``UNIRAG_TORCH_THREADS``, else ``OMP_NUM_THREADS``,
    else the CPUs this process may use (torch's default counts the whole machine's cores)."""
    import torch

    wanted = os.environ.get("UNIRAG_TORCH_THREADS") or os.environ.get("OMP_NUM_THREADS")
    try:
        n = int(wanted) if wanted else available_cores()
    except ValueError:
        n = available_cores()
    torch.set_num_threads(max(1, n))
    # numpy's BLAS to one thread beside a torch model (unless OPENBLAS_NUM_THREADS is set): OpenBLAS's
    # threads spin after each call on the cores torch needs next, and the numpy work beside a model is small
    # (2 BLAS threads on 2 cores: 10.3 against 5.3 ms a query, docs/benchmarks.md).
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")


def onednn_linears(model: Any) -> Any:
    """Run ``model``'s float32 ``nn.Linear`` layers with oneDNN's matrix product instead of the MKL one,
    for inference on the CPU; the parameters, and so the state dict, stay as they are.

    torch's CPU wheels send a float32 linear layer to MKL, which on AMD processors takes its AVX2 code
    path; oneDNN, which the same wheel carries, uses the AVX-512 units. On this project's 2-core EPYC a
    (252 x 384) by (384 x 1536) product took 3.2 ms with MKL and 1.5 ms with oneDNN, and MiniLM encoding
    14 captions 4.2 against 2.9 ms of CPU a query (docs/benchmarks.md). The outputs agree to float
    rounding (the sums are added in another order). A layer falls back to the plain product where
    gradients are recorded, and nothing changes where the wheel has no oneDNN."""
    import torch

    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None
    if op is None:
        return model

    class OneDNNLinear(torch.nn.Linear):
        def forward(self, x):
            if torch.is_grad_enabled() or x.device.type != "cpu":
                return super().forward(x)
            return op(x, self.weight, self.bias, "none", [], "")

    for layer in model.modules():
        if type(layer) is torch.nn.Linear and layer.weight.dtype == torch.float32:
            layer.__class__ = OneDNNLinear
    return model


def resolve_device(device: str | None = "auto") -> str:
    """``None``/"auto" -> "cuda" if present, else "mps", else "cpu"; a device torch does not know or this
    machine lacks is a :class:`~unirag.errors.ConfigError` now rather than a failure in a forward pass.
    Every model is placed through here, so this also caps torch's threads (:func:`configure_torch_threads`)."""
    import torch

    configure_torch_threads()
    if device in (None, "", "auto"):
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    device = str(device).strip().lower()
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"unknown torch device {device!r} ({e}); use auto, cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} requested but CUDA is not available on this machine")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ConfigError(f"device {device!r} requested but this machine has {torch.cuda.device_count()} GPU(s)")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {device!r} requested but the MPS backend is not available on this machine")
    return device


def dtype_name(dtype: str | None, device: str) -> str:
    """The precision ``dtype`` means on ``device``: "float32", "float16" or "bfloat16" ("auto": see the
    module docstring). float16 on CPU is refused: most CPU kernels lack it and it is slower there."""
    if dtype in (None, "", "auto"):
        if device.startswith("cuda"):
            import torch

            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        return "float16" if device.startswith("mps") else "float32"
    name = _DTYPE_ALIASES.get(str(dtype).strip().lower())
    if name is None:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_CHOICES)}")
    if name == "float16" and device == "cpu":
        raise ConfigError("float16 is not supported for CPU inference; use float32 or bfloat16")
    return name


def resolve_dtype(dtype: str | None, device: str):
    """The torch dtype :func:`dtype_name` picks for ``dtype`` on ``device``."""
    import torch

    return getattr(torch, dtype_name(dtype, device))


def diffusers_dtype_kwargs(torch_dtype) -> dict[str, Any]:
    """``from_pretrained`` keyword for a diffusers pipeline's precision: newer releases name it ``dtype``,
    older ones only ``torch_dtype`` (transformers >= 4.56, the lowest unirag takes, names it ``dtype``)."""
    import importlib

    from diffusers import DiffusionPipeline

    module = importlib.import_module(DiffusionPipeline.__module__)
    return {"dtype": torch_dtype} if "_resolve_dtype" in vars(module) else {"torch_dtype": torch_dtype}


def device_map_kwargs(device: str) -> dict[str, Any]:
    """``device_map`` that puts the weights straight onto a GPU while loading (needs ``accelerate``);
    empty on CPU or without accelerate, where the model is moved with ``.to(device)`` after loading."""
    if device == "cpu":
        return {}
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return {}
    return {"device_map": {"": device}}


def free_memory(device: str | None = None) -> None:
    """Return cached GPU memory to the driver after a model was dropped (``close()`` calls this)."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if torch.cuda.is_available() and (device is None or str(device).startswith("cuda")):
        torch.cuda.empty_cache()
    if torch.backends.mps.is_available() and (device is None or str(device).startswith("mps")):
        torch.mps.empty_cache()


def host_to_device(array: Any, device: str, dtype: Any = None):
    """A CPU batch (numpy) as a tensor on ``device``: on CUDA through pinned memory with a non-blocking
    copy (the host-to-device transfer then overlaps the previous batch's compute), cast on the device."""
    import torch

    tensor = torch.from_numpy(array) if not isinstance(array, torch.Tensor) else array
    if str(device).startswith("cuda"):
        return tensor.pin_memory().to(device, non_blocking=True).to(dtype or tensor.dtype)
    return tensor.to(device, dtype=dtype or tensor.dtype)


def check_model_spec(spec: str) -> str:
    """``spec`` if it is an existing local directory or a hub id (``name`` or ``org/name``), else a
    ConfigError; something that looks like a path (``/x``, ``./x``, ``~/x``, ``C:\\x``) must exist."""
    p = Path(spec).expanduser()
    if p.is_dir():
        return str(p.resolve())
    looks_like_path = spec.startswith((".", "/", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", spec) or p.exists()
    if looks_like_path:
        what = "is a file, not a model directory" if p.exists() else "does not exist"
        raise ConfigError(f"model path {spec!r} {what}")
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", spec):
        raise ConfigError(f"{spec!r} is neither an existing model directory nor a Hugging Face hub id (org/name)")
    return spec


def hf_from_pretrained(loader, spec: str, what: str, **kwargs):
    """``loader.from_pretrained(spec)``, failures a ConfigError naming ``spec``: the local cache first, a
    download only when that misses and offline mode (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``,
    ``UNIRAG_OFFLINE``) is off."""
    local = Path(spec).is_dir()
    offline = any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
                  for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "UNIRAG_OFFLINE"))
    try:
        return loader.from_pretrained(spec, local_files_only=True, **kwargs)
    except (OSError, ValueError, KeyError) as first:
        if local or offline:
            where = "local directory" if local else "Hugging Face hub cache (offline mode: no download attempted)"
            raise ConfigError(f"cannot load {what} from {where} {spec!r}: {first}") from None
    try:
        return loader.from_pretrained(spec, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(
            f"cannot load {what} {spec!r}: not in the local Hugging Face cache and it could not be downloaded "
            f"(no network, or no such repository). Pass a local checkpoint directory instead. ({e})"
        ) from None


# -- identifying weights -------------------------------------------------------------------------------
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5")


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, cached per (path, size, mtime) within the process."""
    st = path.stat()
    return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def weights_digest(path: str | Path) -> str:
    """What identifies a checkpoint's *weights* wherever they are stored: a file's SHA-256, or for a
    directory the SHA-256 over its ``config.json`` and weight files (relative names, then contents)."""
    p = Path(path)
    if p.is_file():
        return file_sha256(p)
    files = sorted(f for f in p.rglob("*") if f.is_file()
                   and (f.name == "config.json" or f.suffix in WEIGHT_SUFFIXES))
    if not files:
        raise ConfigError(f"no config.json or weight files ({', '.join(WEIGHT_SUFFIXES)}) under {p}")
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(p).as_posix().encode() + b"\0" + file_sha256(f).encode() + b"\n")
    return h.hexdigest()


def weights_identity(spec: str, model: Any = None) -> dict[str, Any]:
    """``{"weights_sha256": ...}`` for a local checkpoint; ``{"hub_id", "revision"}`` for a hub id
    (the commit the cached snapshot was downloaded at, read from the loaded model's config)."""
    if Path(spec).exists():
        return {"weights_sha256": weights_digest(spec)[:32]}
    revision = getattr(getattr(model, "config", None), "_commit_hash", None)
    return {"hub_id": spec, "revision": revision}
