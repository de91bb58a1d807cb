"""What the official encoders do to an input before the model sees it, written with PIL and numpy.

Explicit rather than a Hugging Face image processor, because those differ from the official code in
ways that move vectors: ``CLIPImageProcessor`` floors the centre-crop offset torchvision rounds, and
``BlipImageProcessor`` switches to a tensor resize when torchvision is installed. On PIL images
torchvision's ``Resize`` *is* ``PIL.Image.resize``, so torchvision is not needed.

* :class:`OpenAIClipTransform`: OpenAI CLIP's ``clip/clip.py`` ``_transform(n_px)`` (UniIR CLIP-SF uses
  it unchanged): bicubic resize of the shorter side, ``CenterCrop`` with a rounded offset, ``ToTensor``,
  ``Normalize``; ``crop_rounding="floor"`` gives Hugging Face's offset (for comparisons).
* :class:`SquareResizeTransform`: BLIP's eval transform as UniIR builds it
  (``src/models/uniir_blip/backbone/transform/blip_transform.py``, ``is_train=False``).
* :func:`clean_clip_text`: OpenAI's tokenizer clean-up before BPE (``clip/simple_tokenizer.py``
  ``basic_clean`` + ``whitespace_clean``), whose HTML unescaping Hugging Face's CLIP tokenizers skip.

Each transform's :meth:`identity` goes into its encoder's fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
CROP_ROUNDINGS = ("round", "floor")
#: The name :func:`clean_clip_text` goes by in encoder identities.
CLIP_TEXT_CLEANING = "openai-clip:ftfy+html.unescape*2+whitespace"
_BICUBIC = 3  # PIL.Image.Resampling.BICUBIC (kept numeric so this module imports without PIL)


def shorter_side_size(width: int, height: int, size: int) -> tuple[int, int]:
    """(width, height) after scaling the shorter side to ``size``: the longer one becomes
    ``int(size * long / short)`` (truncated), as torchvision's ``Resize(int)`` computes it."""
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def center_crop_box(width: int, height: int, crop: int, rounding: str = "round") -> tuple[int, int, int, int]:
    """PIL crop box (left, top, right, bottom) of a centred ``crop`` x ``crop`` square. ``round``: torchvision's
    offset ``int(round((size - crop) / 2.0))`` (torchvision 0.20.1 ``transforms/functional.py:592``);
    ``floor``: Hugging Face's ``(size - crop) // 2``; one pixel apart when ``size - crop`` is 3 mod 4."""
    if rounding == "round":
        left, top = int(round((width - crop) / 2.0)), int(round((height - crop) / 2.0))
    elif rounding == "floor":
        left, top = (width - crop) // 2, (height - crop) // 2
    else:
        raise ValueError(f"crop rounding must be one of {', '.join(CROP_ROUNDINGS)}; got {rounding!r}")
    return left, top, left + crop, top + crop


@dataclass(frozen=True)
class OpenAIClipTransform:
    """OpenAI CLIP's image transform (see the module docstring); call it on PIL images."""

    size: int
    mean: tuple[float, ...] = OPENAI_CLIP_MEAN
    std: tuple[float, ...] = OPENAI_CLIP_STD
    crop_rounding: str = "round"

    def crop(self, image):
        """The resized and centre-cropped PIL image (before conversion to numbers)."""
        w, h = shorter_side_size(*image.size, self.size)
        if (w, h) != image.size:
            image = image.resize((w, h), resample=_BICUBIC)
        return image.crop(center_crop_box(w, h, self.size, self.crop_rounding))

    def __call__(self, images: Sequence[Any]) -> np.ndarray:
        """Pixel values [N, 3, size, size], float32: ``ToTensor`` + ``Normalize`` of each :meth:`crop`."""
        m = np.asarray(self.mean, dtype=np.float32).reshape(3, 1, 1)
        s = np.asarray(self.std, dtype=np.float32).reshape(3, 1, 1)
        out = [(np.asarray(self.crop(im).convert("RGB"), dtype=np.uint8).transpose(2, 0, 1).astype(np.float32)
                / np.float32(255.0) - m) / s for im in images]
        return np.stack(out).astype(np.float32, copy=False)

    def single(self, image) -> np.ndarray:
        """One image's pixel values [3, size, size]: the decode workers' per-image preprocessor."""
        return self([image])[0]

    def identity(self) -> dict[str, Any]:
        return {"kind": "openai-clip", "size": self.size, "resize": "pil-bicubic-shorter-side",
                "crop_offset": self.crop_rounding, "mean": list(self.mean), "std": list(self.std)}


@dataclass(frozen=True)
class SquareResizeTransform(OpenAIClipTransform):
    """BLIP's eval transform (see the module docstring): a PIL bicubic resize to ``size`` x ``size``."""

    def crop(self, image):
        s = self.size
        return image if image.size == (s, s) else image.resize((s, s), resample=_BICUBIC)

    def identity(self) -> dict[str, Any]:
        return {"kind": "square-resize", "size": self.size, "resize": "pil-bicubic", "mean": list(self.mean),
                "std": list(self.std)}


def _field(size: Any, key: str) -> Any:
    """``size["key"]`` of a Hugging Face size setting: a dict (transformers 4) or a ``SizeDict`` (5)."""
    return size.get(key) if isinstance(size, dict) else getattr(size, key, None)


def openai_transform_for(image_processor: Any) -> OpenAIClipTransform | None:
    """:class:`OpenAIClipTransform` with the processor's size, mean and std when a Hugging Face CLIP image
    processor is configured as OpenAI's transform (bicubic resize of the shorter side to the crop size, a
    square centre crop, /255, normalise): Hugging Face's rendition of it floors the crop offset. None for
    any other processor (SigLIP's square resize, a CLIP processor set up otherwise), which then runs as is."""
    p = image_processor
    if not type(p).__name__.startswith("CLIPImageProcessor"):
        return None
    size, crop = getattr(p, "size", None), getattr(p, "crop_size", None)
    short = _field(size, "shortest_edge") if size is not None else None
    if crop is None or short is None or not (short == _field(crop, "height") == _field(crop, "width")):
        return None
    rescale = getattr(p, "rescale_factor", None)
    as_openai = (getattr(p, "do_resize", False) and getattr(p, "do_center_crop", False)
                 and getattr(p, "do_rescale", False) and getattr(p, "do_normalize", False)
                 and rescale is not None and abs(float(rescale) - 1 / 255) < 1e-12
                 and int(getattr(p, "resample", -1)) == _BICUBIC and getattr(p, "do_convert_rgb", True) is not False)
    if not as_openai:
        return None
    return OpenAIClipTransform(int(short), tuple(float(x) for x in p.image_mean), tuple(float(x) for x in p.image_std))


def clean_clip_text(text: str) -> str:
    """OpenAI CLIP's text clean-up before BPE (see the module docstring). Lower-casing is left to the
    tokenizer (OpenAI's and Hugging Face's CLIP tokenizers both lower-case)."""
    import html

    import ftfy
    import regex  # OpenAI's whitespace class (Unicode White_Space); ``re``'s \s also takes \x1c-\x1f

    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return regex.sub(r"\s+", " ", text).strip()
