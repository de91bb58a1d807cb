"""Image-generation metrics through torchmetrics: FID, Inception Score (mean, SD), CLIP Score.

No metric arithmetic is written here; this module feeds torchmetrics correctly:

* images are decoded as RGB by PIL (the official UniRAG code fed OpenCV's BGR) and passed as uint8
  ``(3, H, W)`` tensors at their stored size: the Inception network resizes to 299x299 itself and
  the CLIP processor resizes/crops to its own input, so nothing is resized twice. Batches group
  images of equal size (the network needs one size per batch);
* image files are decoded (and turned into uint8 ``(3, H, W)`` arrays) in decode workers
  (:class:`~unirag.data.decode.DecodePool`, ``decode_workers``: ``auto`` = the cores available, at
  most 8, sets of fewer than 128 images inline; 0 = in this process), a few batches ahead of the
  network, in order: on a GPU the network is fast and one core decoding 5k-30k images is the bound.
  The batches, hence the metrics, are the same either way, and an unreadable file fails with the
  same message;
* FID compares generated images with the real positive image of the *same queries*;
* the Inception network is torch-fidelity's (standard FID/IS weights). torch-fidelity imports
  torchvision, which pulls a multi-GB CUDA torch build, so it is the opt-in extra
  ``unirag[image-metrics]``; without it FID and IS are skipped with one line saying so. Any
  ``nn.Module`` can be injected instead (``fid_feature`` / ``is_feature``) - tests do that;
* CLIP Score loads a Hugging Face CLIP checkpoint from a local directory or the local HF cache
  (default ``openai/clip-vit-base-patch16``, the official code's choice).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from unirag.data.images import ImageLike, as_rgb
from unirag.errors import ConfigError

DEFAULT_CLIP_MODEL = "openai/clip-vit-base-patch16"
INCEPTION_WEIGHTS_FILE = "weights-inception-2015-12-05-6726825d.pth"
INSTALL_HINT = "pip install 'unirag[image-metrics]'  (torch-fidelity + torchvision + opencv-python-headless)"


class MetricUnavailable(Exception):
    """A metric cannot run in this environment; the message is the one line shown to the user."""


def load_uint8(path: ImageLike):
    """``(3, H, W)`` uint8 tensor of the image decoded as RGB (InputError naming the file if unreadable);
    a PIL image, encoded bytes or a uint8 array are taken as they are."""
    import numpy as np
    import torch

    arr = np.array(as_rgb(path), dtype=np.uint8, copy=True)
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()


def chw_uint8(image: Any):
    """An RGB PIL image as the C-contiguous uint8 ``(3, H, W)`` array :func:`load_uint8` makes of it
    (the decode workers' preprocessing)."""
    import numpy as np

    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8).transpose(2, 0, 1))


def uint8_images(paths: Sequence[ImageLike], decode_workers: int | str | None = None,
                 chunk: int = 32) -> Iterator[Any]:
    """:func:`load_uint8` of each image, in order, the files decoded in decode workers ``chunk`` images
    at a time, a few chunks ahead (see the module docstring). Inline when ``decode_workers`` says so
    or when some image is not a file path (PIL images, bytes)."""
    from unirag.data.decode import DecodePool, resolve_decode_workers, workers_for
    from unirag.data.images import is_path_like

    paths = list(paths)
    workers = workers_for(resolve_decode_workers(decode_workers), len(paths))
    if workers == 0 or not all(is_path_like(p) for p in paths):
        for p in paths:
            yield load_uint8(p)
        return
    import torch

    chunk = max(1, int(chunk))
    with DecodePool(workers, preprocess=chw_uint8, batch_rows=chunk) as pool:
        for _, items in pool.map((s, paths[s : s + chunk]) for s in range(0, len(paths), chunk)):
            for d in items:
                yield torch.from_numpy(d.unwrap())


def size_batches(paths: Sequence[str | Path], batch_size: int, decode_workers: int | str | None = 0) -> Iterator[Any]:
    """Stacked uint8 batches; consecutive images of the same size share a batch (no resizing)."""
    import torch

    pending: list[Any] = []
    for img in uint8_images(paths, decode_workers, chunk=batch_size):
        if pending and (img.shape != pending[0].shape or len(pending) >= batch_size):
            yield torch.stack(pending)
            pending = []
        pending.append(img)
    if pending:
        yield torch.stack(pending)


def _sorted_by_size(paths: Sequence[str | Path]) -> list[str | Path]:
    """Order paths so images of the same size are adjacent (fewer, fuller batches); reads headers only."""
    from unirag.data.images import upright_size

    def size(p: str | Path) -> tuple[int, int]:
        if not isinstance(p, str | Path):
            return as_rgb(p).size
        try:
            return upright_size(p)
        except Exception:  # noqa: BLE001 - load_uint8 reports the real error with the path
            return (0, 0)
    return sorted(paths, key=size)


def official_arrays(paths: Sequence[ImageLike | None], *, channels: str = "bgr", size: int | None = 224,
                    seed: int = 0) -> list[Any]:
    """Images as the official UniRAG evaluation feeds them: HWC uint8 arrays read with OpenCV (BGR,
    never converted, when ``channels`` is ``bgr``), resized to ``size`` x ``size`` with ``cv2.resize``
    (bilinear); a ``None`` path becomes uniform random noise of that size (drawn from ``seed``), as the
    official ``load_images`` does for a query without an image (castorini/UniRAG
    src/unirag/eval_image_generation.py@e9a4e00:85-105). The arrays go to the metric functions here
    as they are (a uint8 array is taken as it is): their channel order is not looked at."""
    import numpy as np

    cv2 = _cv2()
    rng = np.random.default_rng(seed)
    out = []
    for p in paths:
        if p is None:
            out.append(rng.integers(0, 256, size=(size or 224, size or 224, 3), dtype=np.uint8))
            continue
        if isinstance(p, str | Path):
            img = cv2.imread(str(p))
            if img is None:
                from unirag.errors import InputError

                raise InputError("OpenCV cannot read this image", path=p)
        else:
            img = np.asarray(as_rgb(p), dtype=np.uint8)[:, :, ::-1]
        if channels == "rgb":
            img = img[:, :, ::-1]
        if size is not None:
            img = cv2.resize(img, (size, size))
        out.append(np.ascontiguousarray(img))
    return out


def resize_arrays(arrays: Sequence[Any], size: int) -> list[Any]:
    """``cv2.resize`` of each array to ``size`` x ``size``: the official Inception Score input (299 from the
    224 images, castorini/UniRAG src/unirag/eval_image_generation.py@e9a4e00:173)."""
    cv2 = _cv2()
    return [cv2.resize(a, (size, size)) for a in arrays]


def _cv2() -> Any:
    if importlib.util.find_spec("cv2") is None:
        raise ConfigError("the official image metric inputs (image_metric_channels bgr / image_metric_size) read "
                          f"and resize images with OpenCV; install it with {INSTALL_HINT}")
    import cv2

    return cv2


def standard_inception(weights: str | Path | None, feature: str) -> Any:
    """torch-fidelity's Inception v3 (``feature`` "2048" for FID, "logits_unbiased" for IS).

    Raises :class:`MetricUnavailable` with the fix when torch-fidelity or the weights are missing.
    """
    if importlib.util.find_spec("torch_fidelity") is None:
        raise MetricUnavailable(f"FID and IS skipped: the standard Inception network needs torch-fidelity; "
                                f"install it with {INSTALL_HINT}")
    import torch

    path = Path(weights) if weights else Path(torch.hub.get_dir()) / "checkpoints" / INCEPTION_WEIGHTS_FILE
    if not path.is_file():
        raise MetricUnavailable(f"FID and IS skipped: Inception weights not found at {path}; pass "
                                f"--inception-weights PATH ({INCEPTION_WEIGHTS_FILE} from torch-fidelity's releases)")
    from torchmetrics.image.fid import NoTrainInceptionV3

    return NoTrainInceptionV3(name="inception-v3-compat", features_list=[feature],
                              feature_extractor_weights_path=str(path))


def frechet_distance(real: Sequence[str | Path], fake: Sequence[str | Path], feature: Any, *,
                     batch_size: int = 32, device: str = "cpu", progress: Callable[[Iterable], Iterable] = iter,
                     decode_workers: int | str | None = None) -> float:
    """torchmetrics FID between two image sets through ``feature`` (an ``nn.Module`` taking uint8 images)."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    metric = FrechetInceptionDistance(feature=feature, normalize=False).to(device)
    for is_real, paths in ((True, real), (False, fake)):
        for batch in progress(size_batches(_sorted_by_size(paths), batch_size, decode_workers)):
            metric.update(batch.to(device), real=is_real)
    return float(metric.compute())


def inception_score(paths: Sequence[str | Path], feature: Any, *, splits: int = 10, seed: int = 0,
                    batch_size: int = 32, device: str = "cpu", progress: Callable[[Iterable], Iterable] = iter,
                    decode_workers: int | str | None = None) -> tuple[float, float]:
    """torchmetrics Inception Score (mean, SD over ``splits``); ``seed`` fixes its random split."""
    import warnings

    import torch
    from torchmetrics.image.inception import InceptionScore

    with warnings.catch_warnings():  # "will save all extracted features": logits only, a few MB per 10k images
        warnings.filterwarnings("ignore", message=".*save all extracted features.*")
        metric = InceptionScore(feature=feature, splits=splits, normalize=False).to(device)
    for batch in progress(size_batches(paths, batch_size, decode_workers)):
        metric.update(batch.to(device))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mean, sd = metric.compute()
    return float(mean), float(sd)


class _ClipFeatures:
    """Adapter: transformers 5 returns ModelOutput from ``get_*_features``; torchmetrics wants tensors."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.config = model.config

    def to(self, device: Any) -> _ClipFeatures:
        self.model = self.model.to(device)
        return self

    @staticmethod
    def _tensor(out: Any) -> Any:
        return out if hasattr(out, "norm") else out.pooler_output

    def get_image_features(self, *args: Any, **kwargs: Any) -> Any:
        return self._tensor(self.model.get_image_features(*args, **kwargs))

    def get_text_features(self, *args: Any, **kwargs: Any) -> Any:
        return self._tensor(self.model.get_text_features(*args, **kwargs))


def load_clip(model: str | Path = DEFAULT_CLIP_MODEL) -> tuple[Any, Any]:
    """(CLIP model, processor) from a local directory or the local Hugging Face cache (no download)."""
    from transformers import AutoProcessor, CLIPModel

    try:
        clip = CLIPModel.from_pretrained(str(model), local_files_only=True).eval()
        processor = AutoProcessor.from_pretrained(str(model), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ConfigError(f"CLIP model {str(model)!r} not found locally ({e.__class__.__name__}); pass "
                          "--clip-model PATH to a downloaded CLIP checkpoint directory (or fill the "
                          "Hugging Face cache)") from None
    return clip, processor


def clip_scores(images: Sequence[str | Path], texts: Sequence[str], model: tuple[Any, Any], *,
                device: str = "cpu", progress: Callable[[Iterable], Iterable] = iter,
                decode_workers: int | str | None = None) -> tuple[float, list[float]]:
    """(corpus CLIP Score, per-pair scores) with torchmetrics ``CLIPScore`` (100 x cosine, floored at 0).

    Each pair goes through ``forward``, which returns that pair's score and accumulates the corpus
    state, so the corpus value is torchmetrics' own ``compute()``.
    """
    import torch
    from torchmetrics.multimodal.clip_score import CLIPScore

    if len(images) != len(texts):
        raise ValueError("images and texts must pair up")
    clip, processor = model
    metric = CLIPScore(model_name_or_path=lambda: (_ClipFeatures(clip), processor)).to(device)
    per_item: list[float] = []
    decoded = uint8_images(images, decode_workers)
    try:
        with torch.no_grad():
            for _path, text in progress(list(zip(images, texts, strict=True))):
                per_item.append(float(metric(next(decoded).to(device), text)))
            return float(metric.compute()), per_item
    finally:
        decoded.close()  # stops the decode workers at once if a pair failed
