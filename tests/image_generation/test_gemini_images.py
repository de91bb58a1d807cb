"""gemini-image backend: google-genai pointed at a local server (http_options base_url), no network."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from fake_openai_server import Reply
from unirag.errors import BackendError, ConfigError
from unirag.generators.gemini import nearest_aspect_ratio, parse_image_response
from unirag.generators.images.base import ImageRequest
from unirag.generators.registry import IMAGE, load_generator
from unirag.retrieval.results import Pair

from .helpers import solid_png

MODEL = "gemini-2.5-flash-image"
GREEN = solid_png((10, 200, 10), size=(20, 10))


def image_reply(png: bytes, text: str | None = "Here is your picture.") -> Reply:
    parts = ([{"text": text}] if text else []) + [
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(png).decode("ascii")}}]
    return Reply(json={"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                       "usageMetadata": {"promptTokenCount": 600, "candidatesTokenCount": 1290,
                                         "totalTokenCount": 1890}})


@pytest.fixture()
def gen(server, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "test-key-not-secret")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    return load_generator(f"gemini-image:{MODEL}", IMAGE, base_url=server.base, timeout=5)


def test_few_shot_request_interleaves_instruction_images_captions_query(server, gen, t2i_data):
    server.push(image_reply(GREEN))
    rec = t2i_data.records
    examples = [Pair.of(t2i_data.root / rec[1]["image"], rec[1]["captions"][1], "img:1"),
                Pair.of(t2i_data.root / rec[2]["image"], rec[2]["captions"][1], "img:2")]
    out = gen.generate(ImageRequest(qid="q", caption=rec[0]["captions"][0], examples=examples, width=1024,
                                    height=576, seed=1234))
    req = server.requests[0]
    assert req.path.endswith(f"/models/{MODEL}:generateContent")
    assert req.headers["x-goog-api-key"] == "test-key-not-secret"
    body = req.json
    parts = body["contents"][0]["parts"]
    kinds = ["image" if "inlineData" in p else "text" for p in parts]
    assert kinds == ["text", "image", "text", "image", "text", "text"]
    assert "2 image(s)" in parts[0]["text"]
    assert base64.urlsafe_b64decode(parts[1]["inlineData"]["data"]) == examples[0].image.read_bytes()
    blob = parts[1]["inlineData"]
    assert blob.get("mimeType", blob.get("mime_type")) == "image/jpeg"  # the SDK writes the snake-case name
    assert parts[2]["text"].endswith(rec[1]["captions"][1]) and parts[4]["text"].endswith(rec[2]["captions"][1])
    assert base64.urlsafe_b64decode(parts[3]["inlineData"]["data"]) == examples[1].image.read_bytes()
    assert parts[5]["text"].endswith(rec[0]["captions"][0])
    config = body["generationConfig"]
    assert config["responseModalities"] == ["TEXT", "IMAGE"] and config["seed"] == 1234
    assert config["imageConfig"] == {"aspectRatio": "16:9"}
    assert np.array_equal(np.asarray(out.image), np.full((10, 20, 3), (10, 200, 10), dtype=np.uint8))
    assert (out.usage.input_tokens, out.usage.output_tokens, out.usage.input_images) == (600, 1290, 2)
    assert out.meta["model_text"] == "Here is your picture."


def test_zero_shot_sends_the_caption_only(server, gen):
    server.push(image_reply(GREEN, text=None))
    gen.generate(ImageRequest(qid="q", caption="A green field."))
    parts = server.requests[0].json["contents"][0]["parts"]
    assert parts == [{"text": "A green field."}]
    assert "imageConfig" not in server.requests[0].json["generationConfig"]  # square is the default


def test_text_only_answer_and_errors(server, gen):
    server.push(Reply.gemini("I cannot draw that."))
    with pytest.raises(BackendError, match="no image.*I cannot draw that") as e:
        gen.generate(ImageRequest(qid="q", caption="c"))
    assert not e.value.retryable
    server.push(Reply(status=429, json={"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}},
                      headers={"Retry-After": "3"}))
    with pytest.raises(BackendError) as e:
        gen.generate(ImageRequest(qid="q", caption="c"))
    assert e.value.retryable and e.value.status == 429 and e.value.retry_after == 3.0
    server.push(Reply(status=400, json={"error": {"code": 400, "message": "bad request", "status": "INVALID"}}))
    with pytest.raises(BackendError) as e:
        gen.generate(ImageRequest(qid="q", caption="c"))
    assert not e.value.retryable and "bad request" in str(e.value)


def test_parse_rejects_corrupt_image_and_empty_response():
    from google.genai import types

    blob = types.Blob(data=b"\x89PNG broken", mime_type="image/png")
    resp = types.GenerateContentResponse(candidates=[types.Candidate(content=types.Content(
        role="model", parts=[types.Part(inline_data=blob)]))])
    with pytest.raises(BackendError, match="could not be decoded") as e:
        parse_image_response(resp)
    assert e.value.retryable
    with pytest.raises(BackendError, match="no candidates") as e:
        parse_image_response(types.GenerateContentResponse(candidates=[]))
    assert e.value.retryable  # as for captions: a body without candidates was cut off on the way


def test_aspect_ratio_and_missing_key(monkeypatch):
    assert nearest_aspect_ratio(1024, 1024) == "1:1"
    assert nearest_aspect_ratio(1536, 1024) == "3:2"
    assert nearest_aspect_ratio(720, 1280) == "9:16"
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        load_generator(f"gemini-image:{MODEL}", IMAGE)
