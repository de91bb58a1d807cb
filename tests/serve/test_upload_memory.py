"""Memory that does not depend on the attacker (issue 29, point 1): a 4.4 KB PNG of 6000x6000 pixels
is decoded to what the encoder needs (not kept at 144 MB), large photos decode at a reduced JPEG scale,
ordinary photos decode exactly as before (answers unchanged), and decodes beyond the service's slots
and queue get 503 with Retry-After while text searches keep working.

The memory itself under 32 concurrent uploads is measured by ``benchmarks/bench_serve_uploads.py``.
"""

from __future__ import annotations

import io

import numpy as np
from fastapi.testclient import TestClient
from PIL import Image

from unirag.data.images import load_rgb
from unirag.serve.app import create_app
from unirag.serve.settings import ServeSettings
from unirag.serve.uploads import DECODE_SIDE, check_image

from .conftest import PHOTOS

LIMITS = {"max_bytes": 10 << 20, "max_pixels": 40_000_000}


def _png(mode: str, side: int, colour=0) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (side, side), colour).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def test_a_small_file_of_huge_dimensions_is_kept_at_the_size_the_encoder_needs():
    for mode in ("1", "P", "L", "RGB", "RGBA"):
        data = _png(mode, 6000)
        got = check_image(data, **LIMITS)
        assert got.mode == "RGB" and DECODE_SIDE <= min(got.size) < 2 * DECODE_SIDE, (mode, got.size)
    assert len(_png("1", 6000)) < 5000  # the probe's upload: 4.4 KB on the wire


def test_a_large_jpeg_decodes_at_a_reduced_scale_with_the_same_content():
    big = Image.open(PHOTOS[3]).convert("RGB").resize((4000, 3000))
    buf = io.BytesIO()
    big.save(buf, format="JPEG", quality=90)
    got = check_image(buf.getvalue(), **LIMITS)
    assert DECODE_SIDE <= min(got.size) < 2 * DECODE_SIDE and got.size[0] > got.size[1]
    small = np.asarray(got.resize((64, 48)), dtype=float)
    want = np.asarray(big.resize((64, 48)), dtype=float)
    assert np.abs(small - want).mean() < 6


def test_ordinary_photos_decode_exactly_as_the_library_does():
    for photo in PHOTOS[:5]:
        data = photo.read_bytes()
        assert np.array_equal(np.asarray(check_image(data, **LIMITS)), np.asarray(load_rgb(data)))


def test_uploads_beyond_the_decode_slots_and_queue_get_503_with_retry_after(engine):
    app = create_app(ServeSettings(index=engine.settings.index, max_decodes=1, decode_queue=0), engine)
    slots = app.state.service.decodes
    with TestClient(app) as c:
        photo = {"image": ("p.jpg", PHOTOS[0].read_bytes(), "image/jpeg")}
        assert c.post("/v1/search", files=photo, data={"k": "2"}).status_code == 200
        slots._admitted.acquire()  # one decode in progress: the slot is taken and nothing may queue
        try:
            r = c.post("/v1/search", files=photo, data={"k": "2"})
            assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
            assert "too many images are being decoded" in r.json()["error"]
            assert c.post("/v1/search", data={"text": "a dog", "k": "2"}).status_code == 200
        finally:
            slots._admitted.release()
        assert c.post("/v1/search", files=photo, data={"k": "2"}).status_code == 200
