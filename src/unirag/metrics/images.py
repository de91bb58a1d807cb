"""Image-generation metrics through torchmetrics: FID, Inception Score (mean, SD), CLIP Score.

No metric arithmetic is written here beyond the bootstrap's resampled figures; this module feeds
torchmetrics correctly. Images are decoded as RGB by PIL (the official UniRAG code fed OpenCV's BGR:
see :func:`official_arrays`) and passed as uint8 ``(3, H, W)`` at their stored size, in batches of equal
size: the Inception network and the CLIP processor resize themselves, so nothing is resized twice.
Files are decoded in decode workers (:class:`~unirag.data.loader.ImageLoader`) a few batches ahead:
on a GPU one core decoding 5k-30k images is the bound. FID compares generated images with the real
positive image of the *same queries*. The Inception network is torch-fidelity's (standard weights),
the opt-in extra ``unirag[image-metrics]`` because it imports torchvision; without it FID and IS are
skipped with one line. Tests inject any ``nn.Module`` instead (``fid_feature`` / ``is_feature``).
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from unirag.data.images import ImageLike, load_rgb, upright_size
from unirag.errors import ConfigError, InputError

DEFAULT_CLIP_MODEL = "openai/clip-vit-base-patch16"
INCEPTION_WEIGHTS_FILE = "weights-inception-2015-12-05-6726825d.pth"
INSTALL_HINT = "pip install 'unirag[image-metrics]'  (torch-fidelity + torchvision + opencv-python-headless)"


class MetricUnavailable(Exception):
    """A metric cannot run in this environment; the message is the one line shown to the user."""


def load_uint8(path: ImageLike):
    """``(3, H, W)`` uint8 tensor of the image decoded as RGB (InputError naming the file if unreadable)."""
    import torch

    return torch.from_numpy(chw_uint8(load_rgb(path)))


def chw_uint8(image: Any):
    """An RGB PIL image as a C-contiguous uint8 ``(3, H, W)`` array (also the decode workers' preprocessing)."""
    import numpy as np

    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8).transpose(2, 0, 1))


def uint8_images(paths: Sequence[ImageLike], engine: Any = None, chunk: int = 32) -> Iterator[Any]:
    """:func:`load_uint8` of each image, in order, decoded by ``engine``'s decode processes ``chunk`` images at
    a time; inline when it says so or when some image is not a file path (PIL images, bytes)."""
    from unirag.data.loader import ImageLoader
    from unirag.runs.engine import engine_options
    from unirag.runtime import decode_processes

    paths = list(paths)
    workers = decode_processes(engine_options(engine).decode_workers, len(paths))
    if workers == 0 or not all(isinstance(p, str | Path) for p in paths):
        yield from map(load_uint8, paths)
        return
    import torch

    chunk = max(1, int(chunk))
    loader = ImageLoader(workers, preprocess=chw_uint8)
    for _, items in loader.map((s, paths[s : s + chunk]) for s in range(0, len(paths), chunk)):
        for d in items:
            yield torch.from_numpy(d.unwrap())


def size_batches(paths: Sequence[str | Path], batch_size: int, engine: Any = None) -> Iterator[Any]:
    """Stacked uint8 batches; consecutive images of the same size share a batch (no resizing)."""
    import torch

    for _, same in itertools.groupby(uint8_images(paths, engine, chunk=batch_size), key=lambda t: t.shape):
        while batch := list(itertools.islice(same, batch_size)):
            yield torch.stack(batch)


def official_arrays(paths: Sequence[str | Path | None], *, channels: str = "bgr", size: int | None = 224,
                    seed: int = 0) -> list[Any]:
    """Images as the official UniRAG evaluation feeds them: HWC uint8 arrays read with OpenCV (BGR, never
    converted, when ``channels`` is ``bgr``), resized to ``size`` x ``size`` with ``cv2.resize``; a ``None``
    path becomes uniform random noise drawn from ``seed``, as the official ``load_images`` does for a query
    without an image (castorini/UniRAG src/unirag/eval_image_generation.py@e9a4e00:85-105)."""
    import numpy as np

    cv2 = opencv()
    rng = np.random.default_rng(seed)
    out = []
    for p in paths:
        if p is None:
            out.append(rng.integers(0, 256, size=(size or 224, size or 224, 3), dtype=np.uint8))
            continue
        img = cv2.imread(str(p))
        if img is None:
            raise InputError("OpenCV cannot read this image", path=p)
        if channels == "rgb":
            img = img[:, :, ::-1]
        out.append(np.ascontiguousarray(img if size is None else cv2.resize(img, (size, size))))
    return out


def opencv() -> Any:
    """cv2, or a ConfigError saying how to install it."""
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


def _progress(items: Iterable, desc: str, show: bool, unit: str = "batch") -> Iterable:
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit=unit, leave=False, disable=not show)


def frechet_distance(real: Sequence[str | Path], fake: Sequence[str | Path], feature: Any, *,
                     batch_size: int = 32, device: str = "cpu", show_progress: bool = False,
                     engine: Any = None, features: list | None = None) -> float:
    """torchmetrics FID between two image sets through ``feature`` (an ``nn.Module`` taking uint8 images).
    ``features``: a list that receives the two ``(n, d)`` float64 feature arrays (real, fake), in input order."""
    import numpy as np
    from torchmetrics.image.fid import FrechetInceptionDistance

    def size(p: Any) -> tuple[int, int]:  # from the headers: images of one size adjacent (fewer, fuller batches)
        if not isinstance(p, str | Path):
            return load_rgb(p).size
        try:
            return upright_size(p)
        except Exception:  # noqa: BLE001 - load_uint8 reports the real error with the path
            return (0, 0)

    seen: list[Any] = []  # torchmetrics keeps only sums; the interval needs the rows
    metric = FrechetInceptionDistance(feature=feature, normalize=False).to(device)
    hook = feature.register_forward_hook(lambda _net, _x, out: seen.append(
        out.detach().double().reshape(out.shape[0], -1).cpu().numpy())) if features is not None else None
    try:
        for is_real, paths in ((True, real), (False, fake)):
            order = sorted(range(len(paths)), key=lambda i: size(paths[i]))
            seen.clear()
            for batch in _progress(size_batches([paths[i] for i in order], batch_size, engine), "FID",
                                   show_progress):
                metric.update(batch.to(device), real=is_real)
            if features is not None:
                rows = np.concatenate(seen) if seen else np.zeros((0, 0))
                features.append(rows[np.argsort(order)])  # back in input order
    finally:
        if hook is not None:
            hook.remove()
    return float(metric.compute())


def frechet_from_features(rows: Any) -> float:
    """FID of real and fake feature rows side by side (``(n, 2d)``: real features, then fake) as
    torchmetrics computes it (unbiased covariances), in float64 where ``rows`` are. ``Tr sqrt(S1 S2)``
    comes from symmetric eigenvalues (of ``A A^T``, ``A = X1c X2c^T / (n-1)``, with fewer images than
    dimensions, else of ``S1^1/2 S2 S1^1/2``): cheaper and steadier than torchmetrics' general
    ``eigvals``, which matters when a bootstrap recomputes it for every resample."""
    import numpy as np
    import torch

    t = rows if isinstance(rows, torch.Tensor) else torch.as_tensor(np.asarray(rows, dtype=float))
    t = t.to(torch.float64)
    n, d = t.shape[0], t.shape[1] // 2
    m1, m2 = t[:, :d].mean(0), t[:, d:].mean(0)
    x1, x2 = t[:, :d] - m1, t[:, d:] - m2
    trace = ((x1 ** 2).sum() + (x2 ** 2).sum()) / (n - 1)
    if n <= d:
        a = x1 @ x2.T / (n - 1)
        eig = torch.linalg.eigvalsh(a @ a.T)
    else:
        s1, s2 = x1.T @ x1 / (n - 1), x2.T @ x2 / (n - 1)
        w, v = torch.linalg.eigh(s1)
        root = (v * w.clamp(min=0).sqrt()) @ v.T
        eig = torch.linalg.eigvalsh(root @ s2 @ root)
    return float(((m1 - m2) ** 2).sum() + trace - 2 * eig.clamp(min=0).sqrt().sum())


def frechet_interval(real: Any, fake: Any, *, n_resamples: int, seed: int, device: str | None = None) -> Any:
    """FID's bootstrap interval over queries: the Fréchet distance of resampled (real, generated) feature
    pairs, recomputed on ``device`` (default: CUDA when available), the spread centred on the measured FID
    (``method="centred"``: repeating images biases a resample's FID upward)."""
    import numpy as np
    import torch

    from unirag.metrics.stats import Interval, bootstrap_interval

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    both = torch.as_tensor(np.concatenate([real, fake], axis=1), dtype=torch.float64).to(device)

    def figure(index_rows: Any) -> Any:  # rows are query indices: the features stay on the device
        idx = np.asarray(index_rows[..., 0], dtype=np.int64)
        flat = idx.reshape(-1, idx.shape[-1])
        return np.array([frechet_from_features(both[torch.as_tensor(i, device=both.device)]) for i in flat]
                        ).reshape(idx.shape[:-1])
    ci = bootstrap_interval(np.arange(len(both)), figure, n_resamples=n_resamples, seed=seed, method="centred")
    return None if ci is None else Interval(max(0.0, ci.low), ci.high, ci.se)  # a distance is never below 0


def inception_score(paths: Sequence[str | Path], feature: Any, *, splits: int = 10, seed: int = 0,
                    batch_size: int = 32, device: str = "cpu", show_progress: bool = False,
                    engine: Any = None, features: list | None = None) -> tuple[float, float]:
    """torchmetrics Inception Score (mean, SD over ``splits``); ``seed`` fixes its random split.
    ``features``: a list that receives the ``(n, classes)`` logits, rows in the order of ``paths`` (what
    :func:`inception_from_logits` resamples for the IS interval)."""
    import warnings

    import torch
    from torchmetrics.image.inception import InceptionScore

    with warnings.catch_warnings():  # "will save all extracted features": logits only, a few MB per 10k images
        warnings.filterwarnings("ignore", message=".*save all extracted features.*")
        metric = InceptionScore(feature=feature, splits=splits, normalize=False).to(device)
    for batch in _progress(size_batches(paths, batch_size, engine), "IS", show_progress):
        metric.update(batch.to(device))
    if features is not None:
        features.append(torch.cat([f.detach().double().cpu() for f in metric.features]).numpy())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mean, sd = metric.compute()
    return float(mean), float(sd)


def inception_from_logits(rows: Any, splits: int) -> Any:
    """The Inception Score of logit rows ``(..., n, classes)`` as torchmetrics computes it on rows already
    in random order: ``splits`` chunks of ceil(n / splits) rows (``torch.chunk``), each
    ``exp(mean KL(p(y|x) || p(y)))`` with its own marginal, averaged."""
    import numpy as np

    rows = np.asarray(rows, dtype=float)
    shifted = rows - rows.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    p = np.exp(log_p)
    n = rows.shape[-2]
    size = -(-n // max(1, int(splits)))
    scores = []
    for start in range(0, n, size):
        pc, lc = p[..., start:start + size, :], log_p[..., start:start + size, :]
        marginal = np.log(pc.mean(axis=-2, keepdims=True))
        scores.append(np.exp((pc * (lc - marginal)).sum(axis=-1).mean(axis=-1)))
    return np.mean(scores, axis=0)


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
                device: str = "cpu", show_progress: bool = False, engine: Any = None) -> tuple[float, list[float]]:
    """(corpus CLIP Score, per-pair scores) with torchmetrics ``CLIPScore`` (100 x cosine, floored at 0).

    Each pair goes through ``forward``, which returns that pair's score and accumulates the corpus
    state, so the corpus value is torchmetrics' own ``compute()``.
    """
    import torch
    from torchmetrics.multimodal.clip_score import CLIPScore

    clip, processor = model
    metric = CLIPScore(model_name_or_path=lambda: (_ClipFeatures(clip), processor)).to(device)
    decoded = uint8_images(images, engine)
    try:
        with torch.no_grad():
            per_item = [float(metric(next(decoded).to(device), text))
                        for text in _progress(texts, "CLIP Score", show_progress, unit="img")]
            return float(metric.compute()), per_item
    finally:
        decoded.close()  # stops the decode workers at once if a pair failed


def image_metrics(images: Sequence[Any], texts: Sequence[str] | None = None, real_images: Sequence[Any] | None = None,
                  *, clip_model: str | Path | None = None, clip: tuple[Any, Any] | None = None,
                  fid_feature: Any = None, is_feature: Any = None, inception_weights: str | Path | None = None,
                  is_splits: int = 10, seed: int = 0, batch_size: int = 32, device: str | None = None,
                  per_item: bool = False, decode_workers: int | str | None = None, engine: Any = None,
                  show_progress: bool = False, fid_features: list | None = None, is_features: list | None = None,
                  is_images: Sequence[Any] | None = None) -> dict[str, Any]:
    """Image generation metrics, as ``unirag evaluate images`` computes them: FID of ``images`` (paths, PIL
    images or encoded bytes) against ``real_images``, CLIP Score of each image against ``texts[i]`` and
    Inception Score (mean, SD).

    CLIP Score needs ``clip_model`` (a CLIP checkpoint directory or cached hub id; the CLI's default is
    ``openai/clip-vit-base-patch16``) or ``clip`` = (model, processor); FID/IS need the
    ``unirag[image-metrics]`` extra, or ``fid_feature`` / ``is_feature`` networks. Returns the metrics
    that ran plus ``"skipped"`` (metric -> why); ``per_item=True``: also each image's CLIP Score.
    ``decode_workers``: processes decoding image files ahead of the networks ("auto"/None: the cores
    available, at most 8, fewer than 128 images inline; 0: in this process); the metrics are the same.
    ``engine``: the run's engine options carrying that setting instead (:func:`~unirag.runs.engine.engine_options`).
    For :func:`~unirag.metrics.image_run.evaluate_image_run`: ``fid_features`` / ``is_features``: lists that receive FID's feature
    rows and IS's logits (for their intervals); ``is_images``: what IS sees instead (the official 299x299
    copies).
    """
    import torch

    from unirag.runs.engine import with_decode_default

    engine = with_decode_default(engine, decode_workers)  # a bad setting fails before any network loads
    if texts is not None and len(texts) != len(images):
        raise ConfigError(f"got {len(images)} images and {len(texts)} texts: give one text per image")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    fakes, reals = list(images), list(real_images) if real_images is not None else None
    metrics: dict[str, float] = {}
    skipped: dict[str, str] = {}
    if reals is None:
        skipped["FID"] = "FID skipped: no real images given"
    else:
        try:
            fid_net = fid_feature if fid_feature is not None else standard_inception(inception_weights, "2048")
            metrics["FID"] = frechet_distance(reals, fakes, fid_net, batch_size=batch_size, device=device,
                                              show_progress=show_progress, engine=engine, features=fid_features)
        except MetricUnavailable as e:
            skipped["FID"] = str(e)
        except RuntimeError as e:  # torchmetrics: fewer than 2 images per set
            skipped["FID"] = f"FID skipped: {e}"
    scores: list[float] = []
    model = clip if texts is not None else None
    if texts is None:
        skipped["CLIP Score"] = "CLIP Score skipped: no texts given"
    elif model is None and clip_model is not None:
        try:
            model = load_clip(clip_model)
        except ConfigError as e:
            skipped["CLIP Score"] = f"CLIP Score skipped: {e}"
    elif model is None:
        skipped["CLIP Score"] = "CLIP Score skipped (--no-clip)"
    if model is not None:
        metrics["CLIP Score"], scores = clip_scores(fakes, list(texts), model, device=device,
                                                    show_progress=show_progress, engine=engine)
    try:
        is_net = is_feature if is_feature is not None else standard_inception(inception_weights, "logits_unbiased")
        metrics["IS"], metrics["IS SD"] = inception_score(list(is_images) if is_images is not None else fakes, is_net,
                                                          splits=is_splits, seed=seed, batch_size=batch_size,
                                                          device=device, show_progress=show_progress,
                                                          engine=engine, features=is_features)
    except MetricUnavailable as e:
        skipped.setdefault("IS", str(e))
    if not metrics:
        raise ConfigError("no image metric could run: " + " | ".join(dict.fromkeys(skipped.values())))
    return {**metrics, "skipped": skipped, **({"per_item": scores} if per_item else {})}  # FID, CLIP Score, IS, IS SD
