"""The service on the files people have: phone photos, 16-bit and transparent uploads, pool files that
left the images root or stopped being images, and secrets in query strings.

Before: uploads embedded sideways / white / on black, thumbnails of phone photos were sideways,
a pool file outside the images root was served by id, a pool file replaced by a non-image gave
500 (and, full size, was sent as image/jpeg), a token in a query string reached uvicorn's access
log verbatim, and /healthz in token mode showed the index path.
"""

from __future__ import annotations

import io
import os
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from image_variants import exif_rotated, grey_8bit, grey_16bit, transparent_background
from unirag.serve.app import create_app
from unirag.serve.engine import Engine
from unirag.serve.settings import ServeSettings
from unirag.serve.uploads import check_image

from .conftest import PHOTOS

MYNTRA = Path(__file__).resolve().parents[1] / "fixtures" / "myntra" / "images"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("uploads")
    product = sorted(MYNTRA.glob("*.jpg"))[1]  # [0] is near-white-insensitive: 0.993 even on black
    return {"photo": PHOTOS[7], "phone": exif_rotated(PHOTOS[7], d / "phone.jpg"),
            "grey8": grey_8bit(PHOTOS[7], d / "grey8.png"), "grey16": grey_16bit(PHOTOS[7], d / "grey16.png"),
            "product": product, "cutout": transparent_background(product, d / "cutout.png")}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("original, copy", [("photo", "phone"), ("grey8", "grey16"), ("product", "cutout")])
def test_uploads_embed_as_the_upright_8_bit_original(engine, files, original, copy) -> None:
    encoder = engine.retriever.encoder
    limits = {"max_bytes": 10 << 20, "max_pixels": 40_000_000}
    got = check_image(files[copy].read_bytes(), **limits)
    want = check_image(files[original].read_bytes(), **limits)
    vectors = encoder.encode_images([got, want])
    assert _cos(vectors[0], vectors[1]) >= 0.99


def test_upload_search_of_the_phone_photo_finds_what_the_upright_one_finds(engine, files) -> None:
    with TestClient(create_app(ServeSettings(index=engine.settings.index), engine)) as c:
        hits = [c.post("/v1/search", files={"image": (n, files[n].read_bytes(), "image/jpeg")},
                       data={"k": "5", "modality": "image"}).json()["hits"] for n in ("photo", "phone")]
    assert [h["did"] for h in hits[0]] == [h["did"] for h in hits[1]]
    assert hits[1][0]["did"] == f"coco:img:{int(PHOTOS[7].stem)}" and hits[1][0]["score"] >= 0.99


@pytest.fixture(scope="module")
def pool_service(files, tmp_path_factory):
    """An index over a root holding a phone photo, a cut-out PNG, a file later replaced by text, and
    candidates whose paths leave the root ('..', absolute, a symlink)."""
    from unirag import Index
    from unirag.data.mbeir import write_candidates
    from unirag.data.records import Candidate, Modality
    from unirag.encoders.registry import load_encoder

    base = tmp_path_factory.mktemp("pool-service")
    root, outside = base / "images", base / "private"
    root.mkdir()
    outside.mkdir()
    shutil.copyfile(files["phone"], root / "phone.jpg")
    shutil.copyfile(files["cutout"], root / "cutout.png")
    shutil.copyfile(PHOTOS[1], root / "replaced.jpg")
    shutil.copyfile(PHOTOS[2], outside / "secret.jpg")
    os.symlink(outside / "secret.jpg", root / "link.jpg")
    paths = {"phone": "phone.jpg", "cutout": "cutout.png", "replaced": "replaced.jpg", "dotdot": "../private/secret.jpg",
             "absolute": str(outside / "secret.jpg"), "symlink": "link.jpg"}
    write_candidates(base / "pool.jsonl", [Candidate(did=d, modality=Modality.IMAGE, img_path=p)
                                           for d, p in paths.items()])
    Index.build(base / "pool.jsonl", base / "index", encoder=load_encoder(None), images_root=root,
                progress=False)
    (root / "replaced.jpg").write_text("this file is no longer a picture")
    settings = ServeSettings(index=base / "index")
    with TestClient(create_app(settings, Engine(settings))) as c:
        yield c


def test_thumbnails_are_upright(pool_service, files) -> None:
    r = pool_service.get("/v1/images/phone?size=64")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    thumb = Image.open(io.BytesIO(r.content)).convert("RGB")
    upright = Image.open(files["photo"]).convert("RGB")
    upright.thumbnail((64, 64))
    assert thumb.size == upright.size  # stored sideways: the sides would be swapped
    assert np.abs(np.asarray(thumb, float) - np.asarray(upright, float)).mean() < 12


def test_pool_images_are_served_as_what_they_are(pool_service) -> None:
    full = pool_service.get("/v1/images/cutout")
    assert full.status_code == 200 and full.headers["content-type"] == "image/png"
    thumb = Image.open(io.BytesIO(pool_service.get("/v1/images/cutout?size=64").content)).convert("RGB")
    assert np.asarray(thumb)[0, 0].min() > 240  # the transparent corner is white, not black


@pytest.mark.parametrize("url", ["/v1/images/replaced", "/v1/images/replaced?size=64"])
def test_a_pool_file_that_no_longer_decodes_is_gone_not_a_500(pool_service, url) -> None:
    r = pool_service.get(url)
    assert r.status_code == 410 and "no longer decodes" in r.json()["error"]


@pytest.mark.parametrize("did", ["dotdot", "absolute", "symlink"])
def test_files_outside_the_images_root_are_not_served(pool_service, did) -> None:
    for url in (f"/v1/images/{did}", f"/v1/images/{did}?size=64"):
        r = pool_service.get(url)
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/json")


def test_no_secret_in_any_log_line_uvicorns_access_log_included(demo_index, tmp_path) -> None:
    """A real ``unirag serve`` process: tokens sent in query strings and headers, right and wrong."""
    from .conftest import serve_process

    token = "tok-" + "s3cr3t" * 4
    api_key = "sk-test-" + "k3y" * 6
    env = {"UNIRAG_TEST_TOKEN": token, "OPENAI_API_KEY": api_key}
    with serve_process(demo_index, tmp_path, "--token-env", "UNIRAG_TEST_TOKEN", env=env) as url:
        alive = urllib.request.urlopen(url + "/healthz?token=" + token, timeout=10).read().decode()
        for path, headers in ((f"/healthz?access_token={token}&x=1", {}),
                              (f"/metrics?token={token}", {"Authorization": f"Bearer {token}"}),
                              (f"/v1/images/coco:img:802?api_key={api_key}", {}),
                              ("/metrics?key=wrong-key-value-123456", {"Authorization": "Bearer wrong-one-but-long-enough"})):
            request = urllib.request.Request(url + path, headers=headers)
            try:
                urllib.request.urlopen(request, timeout=10).read()
            except urllib.error.HTTPError:
                pass
    log = (tmp_path / "serve.log").read_text()
    assert alive == '{"status":"ok"}'  # token mode: alive, nothing else (no index path)
    assert "GET /healthz?access_token=***&x=1" in log  # the access log line is there, masked
    assert token not in log and api_key not in log and "wrong-key-value-123456" not in log
    assert log.count("***") >= 4
