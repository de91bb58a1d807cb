"""Copies of real photos the way people have them: EXIF-rotated phone photos, 16-bit PNGs, product
shots with a transparent background, animations, decompression bombs. Each maker writes a real file
and returns its path; the pixels shown (after orientation / on white) are the original's."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def exif_rotated(src: Path, out: Path, orientation: int = 6) -> Path:
    """The photo stored sideways with an EXIF tag saying how to turn it upright, as phones save them
    (orientation 6: stored turned 90 degrees anticlockwise, shown turned back clockwise)."""
    stored = {6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270, 3: Image.Transpose.ROTATE_180}[orientation]
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.open(src).convert("RGB").transpose(stored).save(out, format="JPEG", quality=95, exif=exif.tobytes())
    return out


def physically_rotated(src: Path, out: Path) -> Path:
    """The sideways pixels without a tag (what the EXIF copy looks like to a reader that ignores it)."""
    Image.open(src).convert("RGB").transpose(Image.Transpose.ROTATE_90).save(out, format="JPEG", quality=95)
    return out


def grey_8bit(src: Path, out: Path) -> Path:
    Image.open(src).convert("L").save(out, format="PNG")
    return out


def grey_16bit(src: Path, out: Path) -> Path:
    """The same grey picture in 16 bits per pixel (mode I;16, values 0..65535), as scanners and
    medical/astro tools write them."""
    grey = np.asarray(Image.open(src).convert("L")).astype(np.uint16) * 257
    Image.fromarray(grey).save(out, format="PNG")
    assert Image.open(out).mode == "I;16"
    return out


def transparent_background(src: Path, out: Path, threshold: int = 250) -> Path:
    """A product photo whose white background is cut out: the near-white region reachable from the
    image's border gets alpha 0 and the hidden colour black, as background-removal tools store it."""
    rgb = np.asarray(Image.open(src).convert("RGB"))
    white = rgb.min(axis=2) > threshold
    background = np.zeros_like(white)
    background[[0, -1], :], background[:, [0, -1]] = white[[0, -1], :], white[:, [0, -1]]
    while True:  # grow from the border through white pixels (4-neighbour flood fill)
        grown = background.copy()
        grown[1:] |= background[:-1]
        grown[:-1] |= background[1:]
        grown[:, 1:] |= background[:, :-1]
        grown[:, :-1] |= background[:, 1:]
        grown &= white
        if (grown == background).all():
            break
        background = grown
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
    rgba[background] = (0, 0, 0, 0)
    Image.fromarray(rgba, mode="RGBA").save(out, format="PNG")
    return out


def animated_gif(src: Path, out: Path) -> Path:
    """A 3-frame GIF whose first frame is the photo and the others are flat colours."""
    first = Image.open(src).convert("RGB")
    frames = [first] + [Image.new("RGB", first.size, c) for c in ((255, 0, 0), (0, 0, 255))]
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    return out


def bomb_png(out: Path, side: int = 20000) -> Path:
    """A 1-bit PNG declaring side x side pixels (400 megapixels for 20000) in ~50 kB."""
    buf = io.BytesIO()
    Image.new("1", (side, side)).save(buf, format="PNG")
    out.write_bytes(buf.getvalue())
    return out
