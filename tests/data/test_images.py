"""Image checks on real photos: a truncated JPEG passes PIL's verify() but not the decode check."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from PIL import Image

from unirag.data.images import BadImageReport, image_problem, load_rgb
from unirag.errors import InputError


@pytest.fixture()
def photos(coco_mini: Path, tmp_path: Path) -> dict[str, Path]:
    src = sorted((coco_mini / "images").glob("*.jpg"))[:2]
    good, cut = tmp_path / "good.jpg", tmp_path / "cut.jpg"
    shutil.copyfile(src[0], good)
    data = src[1].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    (tmp_path / "text.jpg").write_text("not an image")
    return {"good": good, "cut": cut, "text": tmp_path / "text.jpg", "missing": tmp_path / "missing.jpg"}


def test_modes(photos: dict[str, Path]) -> None:
    assert image_problem(photos["good"]) is None
    assert image_problem(photos["cut"]).startswith("corrupt")
    assert image_problem(photos["cut"], "verify") is None  # why "decode" is the default
    assert image_problem(photos["cut"], "exists") is None
    assert image_problem(photos["text"], "verify").startswith("corrupt")
    png = io.BytesIO()
    Image.new("RGB", (8, 8)).save(png, format="PNG")
    broken = bytearray(png.getvalue())
    broken[broken.index(b"IDAT") + 6] ^= 0xFF  # the header opens; verify() finds the chunk's checksum wrong
    (photos["good"].parent / "crc.png").write_bytes(broken)
    assert "checksum" in image_problem(photos["good"].parent / "crc.png", "verify")
    assert image_problem(photos["missing"], "exists") == "not found"


def test_image_problem_report_and_load_rgb(photos: dict[str, Path]) -> None:
    report = BadImageReport()
    for p in [photos[k] for k in ("good", "cut", "text", "missing")]:
        if image_problem(p) is not None:
            report.add(p, image_problem(p))
    assert [Path(p).name for p, _ in report.bad] == ["cut.jpg", "text.jpg", "missing.jpg"]
    assert report.summary(first=2).splitlines()[-1] == "  ... and 1 more"
    assert load_rgb(photos["good"]).mode == "RGB"
    with pytest.raises(InputError, match="cannot decode image"):
        load_rgb(photos["cut"])
    with pytest.raises(InputError, match="image file not found"):
        load_rgb(photos["missing"])
