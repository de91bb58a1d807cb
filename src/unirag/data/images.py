"""The one image loader, and the checks and reports built on it.

Every place where an image enters unirag - the import check, index builds, queries and
``Retriever.search``, server uploads and thumbnails, few-shot examples sent to generators, metrics -
decodes it with :func:`load_rgb`, so what passes the import check is exactly what gets embedded, and
a phone photo looks the same in a search, in an index and on the page. What it does to orientation,
bit depth, transparency, animations, decompression bombs and empty images is the table of
docs/inputs.md ("One image loader"). A missing, corrupt or refused image always raises
:class:`~unirag.errors.InputError` naming the file; :func:`load_rgb` is a module-level function, so
worker processes can call it.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.errors import ConfigError, InputError

#: What the public API accepts wherever an image goes in: a file path, a PIL image, encoded bytes
#: (PNG, JPEG, ...) or an ``H x W``, ``H x W x 3`` or ``H x W x 4`` uint8 (or uint16) array.
ImageLike = Any

#: Background colours transparency can be composited on (the ``image_background`` setting).
BACKGROUNDS = {"white": (255, 255, 255), "black": (0, 0, 0)}

_DECODE_ERRORS: tuple[type[BaseException], ...] = (OSError, SyntaxError, ValueError, EOFError,
                                                     IndexError, KeyError, TypeError, ZeroDivisionError)


def _setting_default(name: str) -> Any:
    from unirag.profiles import SETTINGS

    return SETTINGS[name].default


def load_rgb(image: ImageLike, *, max_pixels: int | None = None, background: str | None = None,
             draft: int | None = None, ahead: Mapping[str, Any] | None = None, loading: str = "normalised"):
    """Decode ``image`` (path, bytes, PIL image or array) to an upright 8-bit RGB PIL image.

    ``max_pixels``: most pixels (width x height) accepted, checked from the header before decoding;
    None reads the ``image_max_pixels`` setting. ``background``: "white" or "black", what transparent
    pixels become; None reads the ``image_background`` setting. ``draft``: decode at a reduced size no
    smaller than ``draft`` pixels a side - JPEGs at a reduced DCT scale, other formats reduced by an
    integer factor right after decoding, so that what is kept (and the copies made to normalise it)
    is small (thumbnails, the import check and the service's uploads use it; the whole stream is still
    read, so truncated files still fail). ``ahead``: images this call's caller had decoded already
    (path -> what :func:`load_rgb` returned for it, e.g. by the
    :class:`~unirag.data.loader.ImageLoader`'s decode workers): a path found there (with no other
    option given) is a copy of that image, not decoded again; any other path is decoded (and fails)
    as usual, so passing them changes nothing but the time. ``loading`` (the ``image_loading``
    setting): ``normalised`` (docs/inputs.md) or ``plain``, PIL's ``Image.open(...).convert("RGB")``
    and nothing else, as the official UniRAG code loads its images (images decoded ahead are
    normalised ones, so ``plain`` decodes again).

    Raises :class:`InputError` naming the file when it is missing, corrupt, a decompression bomb or
    empty, or when ``image`` is not an image at all.
    """
    plain = loading == "plain"  # the setting's values are checked where settings are read
    if ahead and isinstance(image, str | Path) and max_pixels is None and background is None and draft is None \
            and not plain:
        hit = ahead.get(str(Path(image)))
        if hit is not None:
            return hit.copy()
    background = _setting_default("image_background") if background is None else background
    if background not in BACKGROUNDS:
        raise ConfigError(f"image background must be one of {', '.join(BACKGROUNDS)}, got {background!r}")
    from PIL import Image

    image = check_image_like(image, None)
    if isinstance(image, Path | bytes):
        return _decode(image, max_pixels, background, draft, plain)
    if isinstance(image, Image.Image):
        _check_size(image.size, max_pixels, getattr(image, "filename", None) or None)
        return image.convert("RGB") if plain else _normalise(image, background)
    import numpy as np

    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    _check_size((image.shape[1], image.shape[0]), max_pixels, None)
    array = _to_uint8(image)
    mode = "L" if array.ndim == 2 else ("RGB" if array.shape[2] == 3 else "RGBA")
    return _normalise(Image.fromarray(np.ascontiguousarray(array), mode=mode), background)


class _Refused(InputError):
    """An image that decodes but is refused (a bomb, an empty image): reported as such, not as corrupt."""


def _check_size(size: tuple[int, int], max_pixels: int | None, path: str | Path | None) -> None:
    max_pixels = int(_setting_default("image_max_pixels") if max_pixels is None else max_pixels)
    width, height = size
    if width <= 0 or height <= 0:
        raise _Refused(f"empty image ({width}x{height} pixels)", path=path)
    if width * height > max_pixels:
        raise _Refused(f"image is {width}x{height} = {width * height:,} pixels, more than the {max_pixels:,} "
                         "allowed (decompression bomb? raise the image_max_pixels setting / --max-pixels to "
                         "accept it)", path=path)


def _decode(image: Path | bytes, max_pixels: int | None, background: str, draft: int | None, plain: bool,
            verify: bool = False):
    """The image file or encoded bytes ``image``, decoded and normalised; ``verify``: PIL's ``verify()``
    of its structure instead, nothing decoded (None)."""
    from PIL import Image, UnidentifiedImageError

    path, what = (image, "image") if isinstance(image, Path) else (None, "image bytes")
    try:
        with warnings.catch_warnings():
            # PIL's own bomb guard (MAX_IMAGE_PIXELS) warns, then errors: both become InputError here.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(image if path else io.BytesIO(image)) as im:
                _check_size(im.size, max_pixels, path)  # header only: nothing decoded yet
                if verify:
                    return im.verify()
                if getattr(im, "n_frames", 1) > 1:
                    im.seek(0)  # animations: the first frame
                if draft and im.format == "JPEG":
                    im.draft("RGB", (draft, draft))
                im.load()
                if plain:  # the official code's Image.open(...).convert("RGB")
                    return im.convert("RGB")
                return _reduced(_normalise(_reduced(im, draft), background), draft)
    except InputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise _Refused(f"refused as a decompression bomb ({e}; PIL's own limit, which applies whatever "
                       "the image_max_pixels setting says)", path=path) from None
    except UnidentifiedImageError:
        raise InputError(f"cannot decode {what}: not an image file PIL can read", path=path) from None
    except _DECODE_ERRORS as e:
        raise InputError(f"cannot decode {what} ({e.__class__.__name__}: {e})", path=path) from None


def _reduced(im, draft: int | None):
    """``im`` shrunk by the largest integer factor that keeps both sides >= ``draft`` (box filter);
    unchanged without ``draft`` or when it is small already. Palette images are subsampled (a box
    filter would need them as RGB at full size first, 4 bytes a pixel), 1-bit ones reduced as grey."""
    factor = min(im.size) // draft if draft else 1
    if factor < 2:
        return im
    if im.mode == "P":
        from PIL import Image

        return im.resize((im.width // factor, im.height // factor), Image.Resampling.NEAREST)
    try:
        return (im.convert("L") if im.mode == "1" else im).reduce(factor)
    except ValueError:  # a mode PIL cannot reduce (16-bit): reduced after conversion to RGB
        return im


def _normalise(im, background: str):
    """Upright, 8 bits per channel, transparency composited, RGB."""
    from PIL import Image, ImageOps

    with contextlib.suppress(*_DECODE_ERRORS):  # a malformed EXIF block: keep the pixels as stored
        im = ImageOps.exif_transpose(im)
    if im.mode.startswith("I") or im.mode == "F":
        import numpy as np

        pixels = np.asarray(im)  # big-endian 16-bit (I;16B) as uint16, so it scales by 0..65535 too
        im = Image.fromarray(_to_uint8(pixels.astype(np.uint16) if im.mode.startswith("I;16") else pixels), mode="L")
    has_alpha = im.mode in ("RGBA", "LA", "La", "RGBa", "PA") or (im.mode in ("P", "L", "RGB")
                                                                 and "transparency" in im.info)
    if has_alpha:
        rgba = im.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, BACKGROUNDS[background] + (255,))
        return Image.alpha_composite(canvas, rgba).convert("RGB")
    return im if im.mode == "RGB" else im.convert("RGB")


def _to_uint8(array):
    """Map integer or float pixel values to 0..255 by their real range (docs/inputs.md)."""
    import numpy as np

    a = np.asarray(array)
    if a.dtype == np.uint8:
        return a
    if a.dtype == np.bool_:
        return a.astype(np.uint8) * 255
    finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    if a.dtype.kind == "f":
        a = np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=hi, neginf=lo)
    # the first of the usual ranges that holds every value (uint16: always 0..65535), else their own range
    tops = (1.0, 255.0) if a.dtype.kind == "f" else (65535.0,) if a.dtype == np.uint16 else (255.0, 65535.0)
    scale_lo, scale_hi = next(((0.0, top) for top in tops if lo >= 0 and hi <= top), (lo, hi))
    span = (scale_hi - scale_lo) or 1.0
    out = (a.astype(np.float64) - scale_lo) * (255.0 / span)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def check_image_like(image: ImageLike, name: str | None = "image") -> Any:
    """Refuse, without decoding, what cannot be an image: raises :class:`InputError` naming the
    argument ``name`` and what was expected (a missing file, empty bytes, an empty or wrongly shaped
    array, another type). Returns what :func:`load_rgb` decodes: a Path, bytes, a PIL image or an array.
    For callers that may not decode the image themselves (example captioners), and load_rgb's first step."""
    from PIL import Image

    if isinstance(image, str | Path):
        path = Path(image)
        if not path.is_file():
            raise InputError("image file not found" if not path.exists() else "not a file", path=path, field=name)
        return path
    if isinstance(image, bytes | bytearray | memoryview):
        if not bytes(image):
            raise InputError("cannot decode image bytes: empty", field=name)
        return bytes(image)
    if isinstance(image, Image.Image):
        if 0 in image.size:
            raise _Refused(f"empty image ({image.size[0]}x{image.size[1]} pixels)", field=name,
                           path=getattr(image, "filename", None) or None)
        return image
    if not hasattr(image, "__array_interface__"):
        raise InputError(f"expected an image (a path, a PIL image, encoded bytes or a uint8/uint16 array), "
                         f"got {'None' if image is None else type(image).__name__}", field=name)
    import numpy as np

    array = np.asarray(image)
    shape_ok = array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (1, 3, 4))
    if not shape_ok or array.dtype not in (np.uint8, np.uint16, np.bool_):
        raise InputError(f"expected a uint8 (or uint16) image array of shape (H, W), (H, W, 3) or (H, W, 4); "
                         f"got {array.dtype} {array.shape}"
                         + (" (float arrays: scale to 0..255 and cast to uint8 first)"
                            if array.dtype.kind == "f" else ""), field=name)
    if 0 in array.shape:
        raise _Refused(f"empty image array {array.shape}", field=name)
    return array


def image_path_of(image: ImageLike) -> Path | None:
    """The file an image comes from: the path itself, or the file a PIL image was opened from."""
    if isinstance(image, str | Path):
        return Path(image)
    filename = getattr(image, "filename", None)  # set by PIL.Image.open, empty for in-memory images
    return Path(filename) if isinstance(filename, str) and filename and Path(filename).is_file() else None


def png_bytes(image, compress_level: int = 6) -> bytes:
    """Lossless PNG encoding: decoding the bytes gives back exactly these pixels.

    ``compress_level=1`` is about 3x faster for files about 12 % larger (the image run writes every
    picture once, in its run loop, and uses it).
    """
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


@dataclass
class BadImageReport:
    """Images that were skipped, with why; printed as a count and the first few paths."""

    bad: list[tuple[str, str]] = field(default_factory=list)

    def add(self, path: str | Path, reason: str) -> None:
        self.bad.append((str(path), reason))

    def __len__(self) -> int:
        return len(self.bad)

    def summary(self, first: int = 5) -> str:
        if not self.bad:
            return "all images readable"
        lines = [f"{len(self.bad)} image(s) missing or unreadable, skipped:"]
        lines += [f"  {p}: {r}" for p, r in self.bad[:first]]
        if len(self.bad) > first:
            lines.append(f"  ... and {len(self.bad) - first} more")
        return "\n".join(lines)


def save_png_by_content(image: ImageLike, folder: str | Path) -> Path:
    """Save ``image`` (PIL, bytes or array) in ``folder`` as a lossless PNG named by the SHA-256 of its
    encoding, and return the file: the same pixels always map to the same file (written once,
    atomically, so concurrent callers never see a partial file)."""
    import hashlib

    data = png_bytes(load_rgb(image), compress_level=1)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()}.png"
    if not path.is_file():
        from unirag.runs.atomic import atomic_write_bytes

        atomic_write_bytes(path, data)
    return path


def image_problem(path: str | Path, mode: str = "decode", *, max_pixels: int | None = None) -> str | None:
    """Why ``path`` cannot be used as an image, or None when it can.

    ``mode``: "decode" runs :func:`load_rgb` itself (JPEGs at reduced DCT scale, which still walks
    the whole stream), so what passes is exactly what an index build embeds - truncated files,
    decompression bombs and empty images are caught (PIL's ``verify()`` alone passes a truncated
    JPEG); "verify" checks headers/structure and the pixel limit only (faster); "exists" only checks
    the file is there.
    """
    p = Path(path)
    if not p.is_file():
        return "not found"
    try:
        if mode == "decode":
            load_rgb(p, max_pixels=max_pixels, draft=64)
        elif mode == "verify":
            _decode(p, max_pixels, "white", None, False, verify=True)
    except _Refused as e:
        return e.reason
    except InputError as e:
        return f"corrupt ({e.reason})"
    except Exception as e:  # noqa: BLE001 - PIL raises many types for corrupt files
        return f"corrupt ({e.__class__.__name__}: {e})"
    return None


def upright_size(image: str | Path | bytes) -> tuple[int, int]:
    """``(width, height)`` of a file or encoded image as :func:`load_rgb` would return it (EXIF
    orientations 5-8 swap the sides), from the header only: nothing is decoded."""
    from PIL import Image

    src = io.BytesIO(bytes(image)) if isinstance(image, bytes | bytearray | memoryview) else image
    try:
        with Image.open(src) as im:
            width, height = im.size
            turned = exif_orientation(im) in (5, 6, 7, 8)
    except Exception as e:  # noqa: BLE001 - PIL raises many types (bombs included) for bad headers
        raise InputError(f"cannot read the image header ({e.__class__.__name__}: {e})",
                         path=None if isinstance(src, io.BytesIO) else src) from None
    return (height, width) if turned else (width, height)


def exif_orientation(im) -> int:
    """The EXIF orientation tag of an open PIL image (1, "as stored", when absent or unreadable)."""
    try:
        value = im.getexif().get(0x0112, 1)
        return int(value) if value in range(1, 9) else 1
    except _DECODE_ERRORS:
        return 1
