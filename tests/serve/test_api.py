"""The REST API on the bundled real sample (51 COCO photos, 255 captions), through FastAPI's test client.

Every endpoint, and every refusal the service promises: 413 too large, 415 not an image, 400
decompression bomb, 401 without the token, no non-loopback bind without a token, no file system
access from a request path, no API key in responses or logs, CORS only when asked for, 503 on a
generator outage while search keeps working.
"""

from __future__ import annotations

import io
import json
import logging
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from unirag.errors import ConfigError
from unirag.serve.app import create_app
from unirag.serve.engine import Engine
from unirag.serve.settings import ServeSettings

from .conftest import PHOTOS


def make_client(engine: Engine, *, new_engine: bool = False, **options) -> TestClient:
    """A client for a service over the shared loaded index; ``new_engine`` for other generator settings."""
    settings = ServeSettings(index=engine.settings.index, **options)
    eng = Engine(settings, retriever=engine.retriever) if new_engine else engine
    return TestClient(create_app(settings, eng))


@pytest.fixture(scope="module")
def client(engine):
    with make_client(engine) as c:
        yield c


def upload(data: bytes, name: str = "photo.jpg", mime: str = "image/jpeg") -> dict:
    return {"image": (name, data, mime)}


def pool_pixels(client: TestClient, url: str) -> Image.Image:
    r = client.get(url)
    assert r.status_code == 200, r.text
    return Image.open(io.BytesIO(r.content)).convert("RGB")


# -- endpoints --------------------------------------------------------------------------------------
def test_healthz_describes_the_loaded_index(client):
    r = client.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["counts"] == {"text": 255, "image": 51}
    assert body["generator"] == "retrieval:consensus" and body["auth"] is False


def test_text_search_returns_ranked_hits_whose_images_are_served(client):
    r = client.post("/v1/search", data={"text": "a dog resting its head on a laptop", "k": "5"})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert len(hits) == 5
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert all(h["modality"] == "image" and h["caption"] for h in hits)  # text -> images over "any"
    assert hits[0]["did"] == "coco:img:427034"  # the photo of a dog with its head on a laptop
    for h in hits:
        assert h["image_url"] == f"/v1/images/{h['did']}"
        got = client.get(h["image_url"])
        assert got.status_code == 200 and got.headers["content-type"] == "image/jpeg"
        assert got.content == (PHOTOS[0].parent / f"{int(h['did'].split(':')[-1]):012d}.jpg").read_bytes()


def test_image_search_finds_the_photos_own_captions(client):
    photo = PHOTOS[5]
    r = client.post("/v1/search", files=upload(photo.read_bytes()), data={"k": "5", "modality": "text"})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert len(hits) == 5 and all(h["modality"] == "text" for h in hits)
    own = f"/v1/images/coco:img:{int(photo.stem)}"
    assert hits[0]["image_url"] == own  # the nearest caption is one of the uploaded photo's own
    assert hits[0]["score"] > hits[-1]["score"]


def test_fused_search_differs_from_either_input_alone(client):
    photo = PHOTOS[5].read_bytes()
    fused = client.post("/v1/search", files=upload(photo), data={"text": "a giraffe", "k": "10", "modality": "image"})
    alone = client.post("/v1/search", files=upload(photo), data={"k": "10", "modality": "image"})
    text = client.post("/v1/search", data={"text": "a giraffe", "k": "10", "modality": "image"})
    assert fused.status_code == alone.status_code == text.status_code == 200
    ranks = [[h["did"] for h in r.json()["hits"]] for r in (fused, alone, text)]
    assert ranks[0] != ranks[1] and ranks[0] != ranks[2]
    query = fused.json()["query"]
    assert query.pop("selection")["diversity"] == "none"  # the example selection in force is echoed too
    assert query == {"text": "a giraffe", "image": True, "k": 10, "modality": "image"}


@pytest.mark.parametrize("data, message", [
    ({"k": "5"}, "send a text, an image, or both"),
    ({"text": "dog", "k": "0"}, "k must be between 1 and 100"),
    ({"text": "dog", "k": "five"}, "k:"),
    ({"text": "dog", "modality": "video"}, "modality must be one of any, image, text"),
])
def test_bad_search_requests_are_400_with_the_reason(client, data, message):
    r = client.post("/v1/search", data=data)
    assert r.status_code == 400
    assert message in r.json()["error"]


def test_form_and_json_searches_answer_exactly_what_retriever_search_does(client, engine):
    """The service is a shell over ``Retriever.search``: same candidates, same order, same scores,
    same captions, whether the text comes as a form field or in a JSON body."""
    for text, k, modality in (("a dog resting its head on a laptop", 5, "any"), ("a red bus", 8, "image"),
                              ("people on a beach", 3, "text")):
        hits = engine.retriever.search(text=text, k=k, modality=modality)
        want = [(h.did, round(float(h.score), 6)) for h in hits]
        form = client.post("/v1/search", data={"text": text, "k": str(k), "modality": modality})
        as_json = client.post("/v1/search", json={"text": text, "k": k, "modality": modality})
        assert form.status_code == as_json.status_code == 200, (form.text, as_json.text)
        assert [(h["did"], h["score"]) for h in form.json()["hits"]] == want
        assert as_json.json()["hits"] == form.json()["hits"]
        assert [h["caption"] for h in form.json()["hits"]] == [p.caption for p in hits.pairs]


def test_a_hit_without_its_pair_is_shown_as_the_candidate_itself(engine):
    """A candidate whose every pair would show the query (``Hit.pair`` None) is described by itself:
    a text candidate by its own text and no image, an image candidate by its own image."""
    from unirag.data.records import Modality
    from unirag.retrieval.results import Hit
    from unirag.serve.service import hit_json, image_url

    metas, offsets = engine.index.metas, engine.index.offsets
    text, image = metas[offsets[Modality.TEXT]], metas[offsets[Modality.IMAGE]]
    shown = [hit_json(engine._hit(Hit(m.did, 0.5, m.modality.value))) for m in (text, image)]
    assert shown[0] == {"did": text.did, "score": 0.5, "modality": "text", "caption": text.txt, "image_url": None}
    assert shown[1] == {"did": image.did, "score": 0.5, "modality": "image", "caption": None,
                        "image_url": image_url(image.did)}


@pytest.mark.parametrize("body, message", [
    ({"text": "dog", "image": "x"}, "send images as multipart/form-data"),
    ({"text": "dog", "k": "five"}, "k: must be an integer"),
    ({"text": "dog", "k": True}, "k: must be an integer"),
    ({"text": "dog", "modality": "video"}, "modality must be one of any, image, text"),
    ({"text": 3}, "text: must be a string"),
    ({"k": 3}, "send a text, an image, or both"),
    (["dog"], "must be an object"),
])
def test_bad_json_searches_are_400_with_the_reason(client, body, message):
    r = client.post("/v1/search", json=body)
    assert r.status_code == 400 and message in r.json()["error"], r.text
    r = client.post("/v1/search", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "does not parse" in r.json()["error"]


def test_concurrent_searches_share_encoder_calls_and_match_single_answers(client, engine):
    texts = [f"a photo of {w}" for w in ("a dog", "a cat", "a kitchen", "a bed", "a horse", "a beach", "food",
                                           "a street", "a bus", "a giraffe", "a laptop", "a pizza")]
    single = {t: client.post("/v1/search", data={"text": t, "k": "4"}).json()["hits"] for t in texts}
    calls: list[int] = []
    original = engine.search_batch

    def counting(queries, k, modality):
        calls.append(len(queries))
        return original(queries, k, modality)

    engine.search_batch = counting
    try:
        with make_client(engine) as c, ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda t: c.post("/v1/search", data={"text": t, "k": "4"}), texts * 3))
    finally:
        del engine.search_batch
    assert all(a.status_code == 200 for a in answers)
    for t, a in zip(texts * 3, answers, strict=True):
        assert [h["did"] for h in a.json()["hits"]] == [h["did"] for h in single[t]]
    assert sum(calls) == len(texts) * 3
    assert len(calls) < len(texts) * 3 and max(calls) > 1  # some requests were answered by one call


def test_caption_returns_caption_examples_usage_and_cost(client):
    r = client.post("/v1/caption", files=upload(PHOTOS[2].read_bytes()), data={"mode": "rag", "k": "3"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["examples"]) == 3 and body["k"] == 3
    assert body["caption"] in [e["caption"] for e in body["examples"]]  # consensus picks a retrieved caption
    for e in body["examples"]:
        assert pool_pixels(client, e["image_url"]).size[0] > 100
    assert body["usage"]["output_tokens"] == 0 and body["cost_usd"] == 0.0
    assert body["latency_s"] > 0 and body["generator"] == "retrieval:consensus"


def test_caption_random_mode_draws_pool_pairs_seeded_by_the_image(client):
    data = PHOTOS[2].read_bytes()
    a = client.post("/v1/caption", files=upload(data), data={"mode": "random", "k": "4"}).json()
    b = client.post("/v1/caption", files=upload(data), data={"mode": "random", "k": "4"}).json()
    other = client.post("/v1/caption", files=upload(PHOTOS[7].read_bytes()), data={"mode": "random", "k": "4"}).json()
    assert len(a["examples"]) == 4 and a["examples"] == b["examples"]
    assert a["examples"] != other["examples"]


def test_caption_zero_shot_with_a_retrieval_captioner_is_refused_clearly(client):
    r = client.post("/v1/caption", files=upload(PHOTOS[2].read_bytes()), data={"mode": "zero-shot"})
    assert r.status_code == 400
    assert "retrieval:consensus" in r.json()["error"] and "rag" in r.json()["error"]


def test_generate_image_returns_the_image_and_its_examples(client):
    r = client.post("/v1/generate-image", data={"text": "a kitchen with an oven and a fridge", "k": "2"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["examples"]) == 2 and body["generator"] == "retrieval:top1"
    prefix = "data:image/png;base64,"
    assert body["image"].startswith(prefix)
    import base64

    made = Image.open(io.BytesIO(base64.b64decode(body["image"][len(prefix):]))).convert("RGB")
    # retrieval:top1 returns the top example's picture unchanged.
    assert made.tobytes() == pool_pixels(client, body["examples"][0]["image_url"]).tobytes()
    assert (body["width"], body["height"]) == made.size


def test_caption_examples_are_the_pairs_retriever_search_gives_for_the_photo(client, engine):
    """One behaviour for "examples for this photo": the page's Caption tab (/v1/caption) shows the pairs
    ``Retriever.search(photo)`` returns (image similarity), not an image-to-caption search."""
    for photo in PHOTOS[5:8]:
        want = [(p.image_did, p.caption) for p in engine.retriever.search(photo.read_bytes(), k=3).pairs]
        r = client.post("/v1/caption", files=upload(photo.read_bytes()), data={"mode": "rag", "k": "3"})
        assert r.status_code == 200, r.text
        assert [(e["did"], e["caption"]) for e in r.json()["examples"]] == want


def test_cir_leaves_the_reference_image_out_unless_asked(client, engine):
    photo = PHOTOS[4]
    own = next(did for did in (f"coco:img:{photo.stem.lstrip('0')}", f"coco:img:{photo.stem}")
               if engine.image_file(did) is not None)
    kept = client.post("/v1/cir", files=upload(photo.read_bytes()),
                       data={"text": "the same", "k": "5", "keep_reference": "true"}).json()["hits"]
    assert own in [h["did"] for h in kept]
    for data in (photo.read_bytes(), _reencoded(photo)):  # the file itself, and the photo re-encoded
        hits = client.post("/v1/cir", files=upload(data), data={"text": "the same", "k": "5"}).json()["hits"]
        assert len(hits) == 5 and own not in [h["did"] for h in hits]


def _reencoded(path) -> bytes:
    buf = io.BytesIO()
    Image.open(path).convert("RGB").save(buf, format="JPEG", quality=70)
    return buf.getvalue()


def test_cir_ranks_pool_images_and_names_the_stage(client):
    r = client.post("/v1/cir", files=upload(PHOTOS[4].read_bytes()), data={"text": "with a dog instead", "k": "6"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stage"] == "baseline" and len(body["hits"]) == 6
    assert all(h["modality"] == "image" and h["image_url"] for h in body["hits"])
    missing = client.post("/v1/cir", files=upload(PHOTOS[4].read_bytes()), data={"text": " "})
    assert missing.status_code == 400 and "text" in missing.json()["error"]


def test_pool_images_have_caching_headers_and_thumbnails(client):
    url = "/v1/images/coco:img:802"
    full = client.get(url)
    assert full.status_code == 200
    assert "max-age" in full.headers["cache-control"] and full.headers["etag"]
    again = client.get(url, headers={"If-None-Match": full.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    thumb = client.get(url + "?size=64")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert thumb.headers["etag"] != full.headers["etag"]
    im = Image.open(io.BytesIO(thumb.content))
    assert max(im.size) == 64 and len(thumb.content) < len(full.content) / 5
    assert client.get(url + "?size=5000").status_code == 400


@pytest.mark.parametrize("path", [
    "/v1/images/../../../../etc/passwd",
    "/v1/images/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/v1/images//etc/passwd",
    "/v1/images/coco:img:802/../../../../../etc/passwd",
    "/v1/images/000000000802.jpg",
    "/v1/images/images%2F000000000802.jpg",
    "/v1/images/coco:txt:623893",  # a caption candidate has no image
])
def test_images_are_served_by_candidate_id_only(client, path):
    r = client.get(path)
    assert r.status_code == 404 and r.json()["error"]
    assert b"root:" not in r.content and not r.headers["content-type"].startswith("image/")


def test_page_and_assets_are_local(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for asset in ("/static/app.js", "/static/style.css"):
        r = client.get(asset)
        assert r.status_code == 200
        assert "http://" not in r.text and "https://" not in r.text and "//cdn" not in r.text
    assert "http://" not in page.text and "https://" not in page.text
    assert 'src="/static/app.js"' in page.text


def test_openapi_lists_every_endpoint(client):
    spec = client.get("/openapi.json").json()
    assert {"/v1/search", "/v1/caption", "/v1/generate-image", "/v1/cir", "/v1/images/{did}", "/healthz",
            "/metrics"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


def test_docs_page_works_offline(client):
    """/docs loads Swagger UI from this server (the fastapi-offline package's), never from a CDN."""
    import re

    docs = client.get("/docs")
    assert docs.status_code == 200
    urls = re.findall(r"(?:src|href)=['\"]([^'\"]+)['\"]", docs.text)
    urls += re.findall(r"url: *'([^']+)'", docs.text)
    assert "/docs-assets/swagger-ui-bundle.js" in urls and "/openapi.json" in urls, urls
    for url in urls:
        assert url.startswith("/"), f"/docs loads {url} from outside the server"
        assert client.get(url).status_code == 200, url


def test_metrics_count_requests_latencies_and_batches(engine):
    with make_client(engine) as c:
        for _ in range(3):
            assert c.post("/v1/search", data={"text": "a bus", "k": "2"}).status_code == 200
        assert c.post("/v1/search", data={"k": "2"}).status_code == 400
        assert c.get("/v1/images/nope").status_code == 404
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    assert 'unirag_requests_total{endpoint="/v1/search",method="POST",status="200"} 3' in text
    assert 'unirag_requests_total{endpoint="/v1/search",method="POST",status="400"} 1' in text
    assert 'unirag_requests_total{endpoint="/v1/images/{did:path}",method="GET",status="404"} 1' in text
    assert 'unirag_request_latency_seconds_count{endpoint="/v1/search"} 4' in text
    assert 'unirag_request_latency_seconds_bucket{endpoint="/v1/search",le="+Inf"} 4' in text
    assert "unirag_search_batch_size_count 3" in text
    busy = [line.split()[1] for line in text.splitlines() if line.startswith("unirag_search_busy_seconds_total ")]
    assert len(busy) == 1 and float(busy[0]) > 0  # three encoder passes took some time


# -- refusals ---------------------------------------------------------------------------------------
def test_upload_over_the_size_limit_is_413(engine):
    photo = PHOTOS[0].read_bytes()
    assert 50_000 < len(photo) < 100_000
    with make_client(engine, max_upload_bytes=50_000) as c:
        r = c.post("/v1/search", files=upload(photo), data={"k": "3"})  # body within the framing slack
        assert r.status_code == 413 and "limit" in r.json()["error"]
    big = max(PHOTOS, key=lambda p: p.stat().st_size).read_bytes()
    assert len(big) > 200_000
    with make_client(engine, max_upload_bytes=10_000) as c:
        r = c.post("/v1/caption", files=upload(big))  # refused from Content-Length, before parsing
        assert r.status_code == 413 and "limit" in r.json()["error"]
        # A chunked upload declares no length: reading stops at the limit.
        body, boundary = _multipart(big)

        def chunks():
            for i in range(0, len(body), 8192):
                yield body[i:i + 8192]

        r = c.post("/v1/caption", content=chunks(), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert r.status_code == 413 and "limit" in r.json()["error"]


def _multipart(data: bytes) -> tuple[bytes, str]:
    boundary = "unirag-test-boundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.jpg\"\r\n"
            "Content-Type: image/jpeg\r\n\r\n").encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), boundary


@pytest.mark.parametrize("data, name, mime", [
    (b"just some text, not a picture", "notes.txt", "text/plain"),
    (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj", "photo.jpg", "image/jpeg"),  # the claimed type is not trusted
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "x.svg", "image/svg+xml"),
])
def test_upload_that_is_not_an_accepted_image_is_415(client, data, name, mime):
    for endpoint, fields in (("/v1/search", {}), ("/v1/caption", {}), ("/v1/cir", {"text": "red"})):
        r = client.post(endpoint, files=upload(data, name, mime), data=fields)
        assert r.status_code == 415, (endpoint, r.text)
        assert "JPEG, PNG, WebP, GIF or BMP" in r.json()["error"]


@pytest.mark.parametrize("side, says", [
    (8_000, "8000x8000 = 64,000,000 pixels, more than the 40,000,000 allowed"),  # over the service's limit
    (12_000, "exceeds limit"),  # over PIL's own MAX_IMAGE_PIXELS too: its DecompressionBomb check fires
])
def test_decompression_bomb_is_400_before_decoding(client, side, says):
    bomb = io.BytesIO()
    Image.new("1", (side, side)).save(bomb, format="PNG")  # tens of megapixels in a few kilobytes
    assert len(bomb.getvalue()) < 100_000
    for endpoint in ("/v1/search", "/v1/caption"):
        r = client.post(endpoint, files=upload(bomb.getvalue(), "bomb.png", "image/png"))
        assert r.status_code == 400
        assert "decompression bomb" in r.json()["error"] and says in r.json()["error"]


def test_truncated_image_is_400_naming_the_problem(client):
    data = PHOTOS[1].read_bytes()[:5000]
    r = client.post("/v1/caption", files=upload(data))
    assert r.status_code == 400 and "cannot decode the JPEG image" in r.json()["error"]


def test_token_is_required_on_the_api_when_configured(engine, monkeypatch):
    monkeypatch.setenv("UNIRAG_TEST_SERVE_TOKEN", "s3cret-token-value")
    with make_client(engine, token_env="UNIRAG_TEST_SERVE_TOKEN") as c:
        for method, path, kw in (("post", "/v1/search", {"data": {"text": "dog"}}),
                                 ("get", "/v1/images/coco:img:802", {}), ("get", "/metrics", {}),
                                 ("get", "/openapi.json", {}), ("get", "/docs", {}),
                                 ("post", "/v1/caption", {"files": upload(PHOTOS[0].read_bytes())})):
            r = getattr(c, method)(path, **kw)
            assert r.status_code == 401, path
            assert r.headers["www-authenticate"] == "Bearer" and "bearer token" in r.json()["error"]
            wrong = getattr(c, method)(path, headers={"Authorization": "Bearer nope"}, **kw)
            assert wrong.status_code == 401
            ok = getattr(c, method)(path, headers={"Authorization": "Bearer s3cret-token-value"}, **kw)
            assert ok.status_code == 200, path
        assert c.get("/").status_code == 200
        # without the token /healthz only says the service is alive: no index path, version or models
        assert c.get("/healthz").json() == {"status": "ok"}
        assert c.get("/healthz", headers={"Authorization": "Bearer nope"}).json() == {"status": "ok"}
        full = c.get("/healthz", headers={"Authorization": "Bearer s3cret-token-value"}).json()
        assert full["auth"] is True and full["index"] and "s3cret-token-value" not in str(full)


def test_a_short_token_is_refused_at_start_with_one_line_and_exit_2(engine, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("UNIRAG_TEST_SHORT_TOKEN", "x" * 15)
    with pytest.raises(ConfigError, match="15 characters; use at least 16"):
        create_app(ServeSettings(index=engine.settings.index, token_env="UNIRAG_TEST_SHORT_TOKEN"), engine)
    from cli_capture import main_result

    code, _, err = main_result(["serve", "--index", str(tmp_path / "none"), "--token-env", "UNIRAG_TEST_SHORT_TOKEN",
                                "--port", "8999"], capsys)
    assert code == 2 and "use at least 16" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "x" * 15 not in err


def test_non_loopback_bind_is_refused_without_a_token(engine, monkeypatch, tmp_path, capsys):
    for host in ("0.0.0.0", "::", "192.168.1.20", "example.org"):
        with pytest.raises(ConfigError, match="refusing to bind"):
            ServeSettings(index="x", host=host).check()
        with pytest.raises(ConfigError, match="refusing to bind"):
            create_app(ServeSettings(index=engine.settings.index, host=host), engine)
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2", "[::1]"):
        ServeSettings(index="x", host=host).check()
    monkeypatch.setenv("UNIRAG_TEST_BIND_TOKEN", "a-token-of-16-chars")
    ServeSettings(index="x", host="0.0.0.0", token_env="UNIRAG_TEST_BIND_TOKEN").check()
    monkeypatch.delenv("UNIRAG_TEST_UNSET", raising=False)
    with pytest.raises(ConfigError, match="UNIRAG_TEST_UNSET"):
        ServeSettings(index="x", host="0.0.0.0", token_env="UNIRAG_TEST_UNSET").check()
    # The command refuses before loading anything (the index path does not even exist).
    from cli_capture import main_result

    code, _, err = main_result(["serve", "--index", str(tmp_path / "none"), "--host", "0.0.0.0", "--port", "8999"],
                               capsys)
    assert code == 2 and "refusing to bind '0.0.0.0' without a token" in err
    assert "Traceback" not in err


def test_cors_is_off_by_default_and_on_for_the_given_origin(engine, client):
    origin = {"Origin": "http://app.example.test"}
    r = client.post("/v1/search", data={"text": "dog", "k": "1"}, headers=origin)
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    pre = client.options("/v1/search", headers={**origin, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in pre.headers
    with make_client(engine, cors_origins=["http://app.example.test"]) as c:
        r = c.post("/v1/search", data={"text": "dog", "k": "1"}, headers=origin)
        assert r.headers["access-control-allow-origin"] == "http://app.example.test"
        pre = c.options("/v1/search", headers={**origin, "Access-Control-Request-Method": "POST"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "http://app.example.test"
        other = c.post("/v1/search", data={"text": "dog", "k": "1"}, headers={"Origin": "http://evil.test"})
        assert "access-control-allow-origin" not in other.headers


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_generator_outage_is_503_while_search_keeps_working(engine, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-outage-key-123456")
    port = _closed_port()
    with make_client(engine, new_engine=True, generator="openai:gpt-4o", max_attempts=2, retry_base_delay=0.01,
                     generator_options={"base_url": f"http://127.0.0.1:{port}/v1", "timeout": 5}) as c:
        r = c.post("/v1/caption", files=upload(PHOTOS[0].read_bytes()), data={"mode": "rag", "k": "2"})
        assert r.status_code == 503
        assert "generator unavailable" in r.json()["error"] and "Search keeps working" in r.json()["error"]
        s = c.post("/v1/search", data={"text": "a dog", "k": "3"})
        assert s.status_code == 200 and len(s.json()["hits"]) == 3
        metrics = c.get("/metrics").text
    assert 'unirag_generator_errors_total{endpoint="/v1/caption",kind="transient"} 1' in metrics
    assert 'unirag_requests_total{endpoint="/v1/caption",method="POST",status="503"} 1' in metrics


def test_api_key_never_appears_in_responses_or_logs(engine, monkeypatch, caplog, capsys):
    from fake_openai_server import FakeServer, Reply

    key = "sk-test-SECRET-d41d8cd98f00b204e980"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    seen: list[str] = []

    def responder(req):
        auth = req.headers.get("authorization", "")
        seen.append(auth)
        if len(seen) == 1:  # a server that echoes the credentials it got in its error message
            return Reply.error(401, f"invalid credentials: {auth}")
        return Reply.chat(f"A kitchen. (you sent {auth})")

    caplog.set_level(logging.DEBUG)
    with FakeServer(responder) as srv, make_client(engine, new_engine=True, generator="openai:gpt-4o",
                                                    max_attempts=1, generator_options={"base_url": srv.url}) as c:
        bad = c.post("/v1/caption", files=upload(PHOTOS[0].read_bytes()), data={"mode": "rag", "k": "2"})
        good = c.post("/v1/caption", files=upload(PHOTOS[0].read_bytes()), data={"mode": "rag", "k": "2"})
        texts = [bad.text, good.text, c.get("/healthz").text, c.get("/metrics").text,
                 json.dumps(dict(bad.headers)), json.dumps(dict(good.headers))]
    assert seen and all(key in s for s in seen)  # the key really went to the generator server
    assert bad.status_code == 503 and "invalid credentials" in bad.json()["error"]
    assert good.status_code == 200 and good.json()["caption"].startswith("A kitchen.")
    out = capsys.readouterr()
    everything = "\n".join(texts + [out.out, out.err, caplog.text])
    assert "generator failed" in caplog.text  # the failure was logged ...
    assert key not in everything  # ... without the key


def _agent_reply(req):
    """Scripted X^R agents: well-formed answers for every role, recognised by the prompt's opening words."""
    from fake_openai_server import Reply

    content = req.json["messages"][0]["content"]
    prompt = (content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)).strip()
    if prompt.startswith("Describe this image"):
        return Reply.chat("a kitchen with white cabinets")
    if "The image shown is the reference image" in prompt:
        return Reply.chat(json.dumps({"target_caption": "a kitchen with a dog",
                                      "attributes": [{"attribute": "a dog", "present": True}]}))
    if prompt.startswith("You help find a target image"):
        return Reply.chat(json.dumps({"target_caption": "a kitchen with a dog", "modifications": ["add a dog"]}))
    if prompt.startswith("You write verification statements"):
        return Reply.chat(json.dumps({"statements": [{"statement": "There is a dog", "answer": True}]}))
    if prompt.startswith(("Here is the caption of an image", "Look at the image")):
        return Reply.chat(json.dumps({"answers": [True]}))
    return Reply.error(400, f"unexpected prompt: {prompt[:80]}")


def test_cir_with_agents_runs_xr_and_names_its_final_stage(engine, monkeypatch, tmp_path):
    from fake_openai_server import FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-agents-key-0000")
    with FakeServer(_agent_reply) as srv:
        agents = tmp_path / "agents.yaml"
        agents.write_text(f"defaults:\n  model: openai:fake-vlm\n  base_url: {srv.url}\n"
                          "settings:\n  k_prime: 5\n  concurrency: 4\n")
        with make_client(engine, new_engine=True, cir_agents=str(agents)) as c:
            assert c.get("/healthz").json()["cir"] == "x^r agents"
            r = c.post("/v1/cir", files=upload(PHOTOS[0].read_bytes()), data={"text": "with a dog", "k": "8"})
        prompts = [q.json["messages"][0]["content"] for q in srv.requests]
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stage"] == "xr" and len(body["hits"]) == 8
    assert len({h["did"] for h in body["hits"]}) == 8 and all(h["image_url"] for h in body["hits"])
    assert all(h["score"] is None for h in body["hits"])  # X^R ranks, it has no single similarity
    assert len(prompts) >= 51  # the agents captioned the 51 gallery images and judged the top k'
