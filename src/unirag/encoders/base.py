"""The encoder protocol and the behaviour every backend shares.

A backend implements :meth:`Encoder._embed_texts` and :meth:`Encoder._embed_preprocessed` with its
:meth:`Encoder.image_preprocessor` (or :meth:`Encoder._embed_images`), returning raw vectors;
this base class normalises, batches, fuses image+text inputs UniIR CLIP-SF style, and dispatches
records by modality, so these exist once, not per backend. Image files are decoded (and preprocessed)
in decode workers ahead of the model (:mod:`unirag.data.loader`).

An encoder's :meth:`~Encoder.fingerprint` hashes :meth:`~Encoder.identity`: what decides the vectors
(the weights, the preprocessing, the fusion), never where the weights are stored or the device and
precision they run in. So an index built in bfloat16 on a GPU is searched in float32 on a CPU.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.records import Candidate, Modality, Query, resolve_image
from unirag.runtime import decode_processes, free_memory, resolve_device, resolve_dtype

ImageInput = Any  # a path (str | Path) or a PIL image


@dataclass(frozen=True)
class Prepared:
    """An image already decoded and put through :meth:`Encoder.image_preprocessor` (in a decode worker)."""

    array: np.ndarray


def stack_rows(arrays: Sequence[Any]):
    """``np.stack(arrays)``, or, when they are the consecutive rows of one batch (a job the workers sent
    back stacked), a view of those rows: no copy."""
    first = arrays[0]
    base, size = getattr(first, "base", None), getattr(first, "nbytes", 0)
    if isinstance(base, np.ndarray) and base.flags.c_contiguous and all(
            isinstance(a, np.ndarray) and a.base is base and a.flags.c_contiguous and a.shape == first.shape
            and a.dtype == first.dtype and _address(a) == _address(first) + i * size for i, a in enumerate(arrays)):
        start = _address(first) - _address(base)
        if 0 <= start and start + size * len(arrays) <= base.nbytes:
            whole = base.reshape(-1).view(np.uint8)[start : start + size * len(arrays)]
            return whole.view(first.dtype).reshape((len(arrays), *first.shape))
    return np.stack(arrays)


def _address(a: Any) -> int:
    return a.__array_interface__["data"][0]  # where the array's first byte is


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32, copy=False)


#: UniIR CLIP-SF (``clip_sf.py``: ``fuse_embeddings = img_emb + txt_emb``): the *raw* embeddings are
#: summed and the sum is normalised at scoring time.
FUSION_RAW_SUM = "raw-sum"
#: Sum of the separately normalised embeddings (for encoders whose raw vectors have unrelated scales).
FUSION_NORMALISED_SUM = "normalised-sum"


class Encoder(ABC):
    """Texts, images and image+text inputs -> L2-normalised float32 vectors of size ``dim``."""

    #: Identifier shown to users and recorded in index manifests ("offline-...", a HF id or a local path).
    name: str
    dim: int
    batch_size: int = 32
    #: How image+text inputs are combined (see :meth:`encode_fused`).
    fusion: str = FUSION_RAW_SUM
    #: Processes that decode (and preprocess) image files ahead of the model: None = auto (the
    #: cores available, capped; small jobs inline), 0 = inline. Never changes the vectors.
    decode_workers: int | None = None
    #: run the forward passes under this autocast precision on CUDA ("float16": UniIR's use_fp16; None: off)
    autocast_dtype: str | None = None
    #: the images' transform (:mod:`unirag.encoders.preprocess`), whose ``single`` is the image preprocessor
    image_transform: Any = None

    def _place(self, device: str | None, dtype: str | None = "float32") -> None:
        """Cap torch's threads; set ``device`` and ``torch_dtype`` as the options resolve ("auto": the GPU if
        there is one, see :mod:`unirag.runtime`). :meth:`config` records both."""
        self.device = resolve_device(device)
        self.torch_dtype = resolve_dtype(dtype, self.device)

    def _autocast(self):
        """The autocast context of the forward passes (a no-op unless ``autocast_dtype`` is set on CUDA)."""
        import contextlib

        if self.autocast_dtype is None or not str(getattr(self, "device", "cpu")).startswith("cuda"):
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type="cuda", dtype=getattr(torch, self.autocast_dtype))

    @abstractmethod
    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Raw (unnormalised) embeddings of one batch of texts."""

    def image_preprocessor(self) -> Callable[[Any], np.ndarray] | None:
        """A picklable callable RGB PIL image -> the array the model takes, run in the decode workers
        (by default the ``single`` of :attr:`image_transform`); backends that return one also implement
        :meth:`_embed_preprocessed`. None: the workers only decode and :meth:`_embed_images` gets PIL images."""
        return getattr(self.image_transform, "single", None)

    def _embed_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        """Raw embeddings of a stacked batch of :meth:`image_preprocessor` outputs."""
        raise NotImplementedError(f"{type(self).__name__} has no image preprocessor")

    def _embed_images(self, images: Sequence[Any]) -> np.ndarray:
        """Raw embeddings of one batch of images: :meth:`_embed_preprocessed` of their :meth:`pixels`.
        Backends without an :meth:`image_preprocessor` replace it (they get PIL images or paths)."""
        return self._embed_preprocessed(self.pixels(images))

    def pixels(self, images: Sequence[Any]) -> np.ndarray:
        """The stacked :meth:`image_preprocessor` outputs of ``images``: :class:`Prepared` ones (made in the
        decode workers) as they are, paths and PIL images decoded and preprocessed here the same way."""
        if images and isinstance(images[0], Prepared):
            return stack_rows([p.array for p in images])
        from unirag.data.images import load_rgb
        from unirag.data.loader import preprocessed

        pre = self.image_preprocessor()
        return np.stack([preprocessed(pre, load_rgb(im)) for im in images])

    def image_loader(self, n_images: int | None = None):
        """The :class:`~unirag.data.loader.ImageLoader` for a job of ``n_images`` (None: unknown): the
        encoder's setting (``auto``: fewer for a model on the CPU) and its preprocessor."""
        from unirag.data.loader import ImageLoader

        device = getattr(self, "device", None)  # None: unknown (a stand-in, a plugin): not assumed CPU
        on_cpu = isinstance(device, str) and device.startswith("cpu")
        workers = decode_processes(self.decode_workers, n_images, model_on_cpu=on_cpu)
        return ImageLoader(workers, self.image_preprocessor())

    def prepared(self, loader, image: Any) -> Any:
        """What a decoded item of ``loader`` is handed to :meth:`_embed_images` as."""
        return Prepared(image) if loader.preprocess is not None else image

    def identity(self) -> dict[str, Any]:
        """Everything that changes the vectors and nothing else (not the path, device or precision of
        the weights); two encoders with equal identities are interchangeable. By default the name stands
        for the model; backends that load weights from a path replace it with the weights' identity."""
        return {"name": self.name, "dim": self.dim, "fusion": self.fusion}

    def config(self) -> dict[str, Any]:
        """What the index manifest records: the identity plus where and how the model ran."""
        ran = {"device": self.device, "dtype": str(self.torch_dtype).removeprefix("torch.")} \
            if hasattr(self, "torch_dtype") else {}
        return {"name": self.name, **self.identity(), **ran,
                **({"autocast": self.autocast_dtype} if self.autocast_dtype else {})}

    def fingerprint(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def close(self) -> None:
        """Drop the model and return its GPU memory (the encoder cannot be used afterwards)."""
        if hasattr(self, "model"):
            self.model = None
        free_memory(getattr(self, "device", None))

    # -- public API -------------------------------------------------------------------------
    def _batched(self, fn, items: Sequence, progress: bool, desc: str, normalize: bool = True) -> np.ndarray:
        if len(items) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        from tqdm.auto import tqdm

        starts = range(0, len(items), self.batch_size)
        out = [np.asarray(fn(items[s : s + self.batch_size]), dtype=np.float32)
               for s in tqdm(starts, desc=desc, disable=not progress or len(items) <= self.batch_size, unit="batch")]
        vecs = np.concatenate(out, axis=0)
        return l2_normalize(vecs) if normalize else vecs

    def encode_texts(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self._batched(self._embed_texts, list(texts), progress, "encode texts")

    def _decoder(self, images: list) -> Callable[[list], list]:
        """For :meth:`_batched` over ``images``: takes its batches, in order, and returns them with the files
        decoded (and preprocessed) ahead of the model by :meth:`image_loader`; a missing or corrupt file
        raises :class:`~unirag.errors.InputError` naming it. Images that are not all files pass as they are."""
        if not images or not all(isinstance(x, str | Path) for x in images):
            return list
        loader, size = self.image_loader(len(images)), self.batch_size
        stream = loader.map((s, images[s : s + size]) for s in range(0, len(images), size))

        def decode(batch: list) -> list:  # _batched's batches are the stream's, in the same order
            _, decoded = next(stream)
            return [self.prepared(loader, d.unwrap()) for _, d in zip(batch, decoded, strict=True)]
        return decode

    def encode_images(self, images: Sequence[ImageInput], progress: bool = False, normalize: bool = True) -> np.ndarray:
        items = list(images)
        decode = self._decoder(items)
        return self._batched(lambda b: self._embed_images(decode(b)), items, progress, "encode images", normalize)

    def encode_fused(self, images: Sequence[ImageInput], texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Score-level fusion of image and text embeddings into one unit vector: ``raw-sum`` (UniIR CLIP-SF)
        ``normalize(img + txt)`` of the raw embeddings, so the larger raw norm weighs more; ``normalised-sum``
        ``normalize(normalize(img) + normalize(txt))``."""
        if len(images) != len(texts):
            raise ValueError(f"fused encoding needs as many images as texts ({len(images)} != {len(texts)})")
        if self.fusion not in (FUSION_RAW_SUM, FUSION_NORMALISED_SUM):
            raise ValueError(f"unknown fusion {self.fusion!r}")
        raw = self.fusion == FUSION_RAW_SUM
        img = self.encode_images(images, progress, normalize=not raw)
        txt = self._batched(self._embed_texts, list(texts), progress, "encode texts", normalize=not raw)
        if not raw:
            img, txt = l2_normalize(img), l2_normalize(txt)
        return l2_normalize(img + txt)

    def encode_records(self, records: Sequence[Candidate | Query], images_root: str | Path | None,
                       progress: bool = False) -> np.ndarray:
        """Encode queries or candidates of any modality mix, keeping their order."""
        out = np.zeros((len(records), self.dim), dtype=np.float32)
        groups: dict[Modality, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(r.modality, []).append(i)
        for modality, idx in groups.items():
            texts = [records[i].txt or "" for i in idx]
            imgs = [resolve_image(records[i].img_path, images_root) for i in idx]
            if modality is Modality.TEXT:
                out[idx] = self.encode_texts(texts, progress)
            elif modality is Modality.IMAGE:
                out[idx] = self.encode_images(imgs, progress)
            else:
                out[idx] = self.encode_fused(imgs, texts, progress)
        return out
