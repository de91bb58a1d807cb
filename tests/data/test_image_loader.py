"""The one image loader (``unirag.data.images.load_rgb``) on real files made from the fixture photos.

Each case failed before the loader existed: EXIF orientation ignored (sideways), 16-bit PNG almost
white, transparent pixels black, a bomb raising PIL's DecompressionBombError, an empty array a
ZeroDivisionError deep in an encoder.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from image_variants import (
    animated_gif,
    bomb_png,
    exif_rotated,
    grey_8bit,
    grey_16bit,
    physically_rotated,
    transparent_background,
)
from unirag.data.images import image_problem, load_rgb
from unirag.errors import InputError


@pytest.fixture(scope="module")
def photo(coco_mini: Path) -> Path:
    return sorted((coco_mini / "images").glob("*.jpg"))[0]


@pytest.fixture(scope="module")
def product(myntra: Path) -> Path:
    return sorted((myntra / "images").glob("*.jpg"))[0]


def _px(image) -> np.ndarray:
    return np.asarray(image, dtype=np.float64)


def test_exif_orientation_is_applied_for_paths_bytes_and_pil(photo: Path, tmp_path: Path) -> None:
    tagged = exif_rotated(photo, tmp_path / "phone.jpg")
    upright = _px(Image.open(photo).convert("RGB"))
    for given in (tagged, tagged.read_bytes(), Image.open(tagged)):
        got = _px(load_rgb(given))
        assert got.shape == upright.shape  # stored sideways: (w, h) swapped without the tag
        assert np.abs(got - upright).mean() < 3  # JPEG re-encoding only
    from unirag.data.images import upright_size

    assert upright_size(tagged) == Image.open(photo).size
    sideways = _px(load_rgb(physically_rotated(photo, tmp_path / "side.jpg")))
    assert sideways.shape != upright.shape  # no tag: nothing is turned


def test_16_bit_png_maps_by_its_range_not_to_white(photo: Path, tmp_path: Path) -> None:
    eight = _px(load_rgb(grey_8bit(photo, tmp_path / "g8.png")))
    sixteen = _px(load_rgb(grey_16bit(photo, tmp_path / "g16.png")))
    assert np.abs(sixteen - eight).max() <= 1
    assert sixteen.mean() < 200  # a plain convert("RGB") clips I;16 to ~255 everywhere
    assert load_rgb(np.asarray(Image.open(tmp_path / "g16.png")).astype(np.uint16)).mode == "RGB"
    for mode in ("I;16", "I;16B"):  # big-endian too: 200 of 65535 is dark, not 200 of 255
        dim = Image.new(mode, (2, 2))
        dim.putpixel((0, 0), 200)
        assert load_rgb(dim).getpixel((0, 0)) == (1, 1, 1), mode


def test_transparency_is_composited_on_white_by_default(product: Path, tmp_path: Path) -> None:
    cut = transparent_background(product, tmp_path / "cut.png")
    alpha = np.asarray(Image.open(cut))[..., 3] == 0
    assert alpha.mean() > 0.3
    white = _px(load_rgb(cut))
    assert (white[alpha] == 255).all()
    assert np.abs(white - _px(Image.open(product).convert("RGB"))).mean() < 3
    black = _px(load_rgb(cut, background="black"))  # the setting's other value: convert("RGB")'s behaviour
    assert (black[alpha] == 0).all()


def test_animation_gives_its_first_frame(photo: Path, tmp_path: Path) -> None:
    gif = animated_gif(photo, tmp_path / "anim.gif")
    frame = _px(load_rgb(gif))
    assert np.abs(frame - _px(Image.open(photo).convert("RGB"))).mean() < 25  # GIF palette only
    assert not (frame[..., 0] > 250).all()  # not the red second frame


def test_bomb_is_an_input_error_before_decoding(tmp_path: Path) -> None:
    bomb = bomb_png(tmp_path / "bomb.png")
    assert bomb.stat().st_size < 100_000
    for given in (bomb, bomb.read_bytes()):
        with pytest.raises(InputError, match="decompression bomb"):
            load_rgb(given)
    small = bomb_png(tmp_path / "small.png", side=3000)  # 9 MP: under PIL's limit, over ours
    with pytest.raises(InputError, match=r"3000x3000 = 9,000,000 pixels, more than the 1,000,000 allowed"):
        load_rgb(small, max_pixels=1_000_000)
    assert load_rgb(small).size == (3000, 3000)  # the default limit (image_max_pixels) is 40 MP
    assert image_problem(bomb).startswith("refused as a decompression bomb")
    assert image_problem(bomb, "verify").startswith("refused as a decompression bomb")
    assert "pixels, more than" in image_problem(small, max_pixels=1_000_000)


def test_empty_and_non_images_are_input_errors(tmp_path: Path) -> None:
    for array in (np.zeros((0, 0, 3), np.uint8), np.zeros((5, 0, 3), np.uint8), np.zeros((0, 4), np.uint8)):
        with pytest.raises(InputError, match="empty image"):
            load_rgb(array)
    with pytest.raises(InputError, match="float arrays"):
        load_rgb(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(InputError, match="expected an image .*got int"):
        load_rgb(12)
    with pytest.raises(InputError, match="empty"):
        load_rgb(b"")


def test_import_check_uses_the_loader(photo: Path, tmp_path: Path) -> None:
    """What passes the check is what gets embedded: the bomb is listed, the tagged photo passes."""
    big = bomb_png(tmp_path / "big.png", side=7100)  # 50 MP: decodes, but over the 40 MP image_max_pixels
    files = [exif_rotated(photo, tmp_path / "ok.jpg"), bomb_png(tmp_path / "bomb.png"), big]
    bad = [(Path(p).name, image_problem(p)) for p in files if image_problem(p) is not None]
    assert [name for name, _ in bad] == ["bomb.png", "big.png"]
    assert bad[0][1].startswith("refused as a decompression bomb")  # refused, not "corrupt"
    assert "7100x7100 = 50,410,000 pixels, more than the 40,000,000 allowed" in bad[1][1]
    with pytest.raises(InputError, match="more than the 40,000,000 allowed"):
        load_rgb(big)  # the build refuses what the check refuses


def test_loader_is_a_picklable_module_function() -> None:
    """Worker processes (a parallel decode pipeline) receive it by reference."""
    assert pickle.loads(pickle.dumps(load_rgb)) is load_rgb
