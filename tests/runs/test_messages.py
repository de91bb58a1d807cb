"""The typed interleaved message model."""

from __future__ import annotations

import base64

import pytest

from unirag.messages import ImagePart, Message, TextPart, render_for_log


def test_image_part_needs_exactly_one_source(tmp_path):
    with pytest.raises(ValueError):
        ImagePart()
    with pytest.raises(ValueError):
        ImagePart(path=tmp_path / "a.png", data=b"x")


def test_jpeg_file_is_sent_as_is(coco_mini):
    path = sorted((coco_mini / "images").glob("*.jpg"))[0]
    part = ImagePart(path=path)
    data, mime = part.encoded()
    assert mime == "image/jpeg" and data == path.read_bytes()
    url = part.data_url()
    assert url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == path.read_bytes()
    assert part.load().mode == "RGB"


def test_message_text_and_images_in_order(coco_mini):
    paths = sorted((coco_mini / "images").glob("*.jpg"))[:2]
    m = Message("user", [ImagePart(path=paths[0], label="ex1"), TextPart("first text"), ImagePart(path=paths[1]),
                         TextPart("second text")])
    assert m.text == "first textsecond text"
    assert [p.path for p in m.images] == paths
    log = render_for_log([Message("system", [TextPart("sys")]), m])
    assert log == (f"[system]\nsys\n\n[user]\n<image ex1>\nfirst text\n<image {paths[1].name}>\nsecond text")
