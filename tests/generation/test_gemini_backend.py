"""The Gemini backend through google-genai, pointed at the local fake server: request rendering and errors."""

from __future__ import annotations

import base64

import pytest

from fake_openai_server import Reply
from unirag.errors import BackendError, ConfigError
from unirag.generators.base import GenerationOptions
from unirag.generators.registry import load_generator
from unirag.prompts.caption import build_caption_prompt, caption_template
from unirag.retrieval.results import Pair


@pytest.fixture
def gemini(fake_server, no_api_keys, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "gm-secret")
    fake_server.responder = lambda req: Reply.gemini("two people on a motorcycle", prompt_tokens=900,
                                                     output_tokens=8)
    return load_generator("gemini:gemini-1.5-pro", base_url=fake_server.base, timeout=2)


def _b64(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def test_request_keeps_instruction_first_then_pairs_then_query(coco_set, gemini, fake_server):
    rows, root = coco_set["rows"], coco_set["images_root"]
    imgs = [root / r["image"] for r in rows[:3]]
    shots = [Pair.of(imgs[1], rows[1]["captions"][0]), Pair.of(imgs[2], rows[2]["captions"][0])]
    prompt = build_caption_prompt(caption_template("gemini"), imgs[0], shots)
    out = gemini.generate(prompt.messages, GenerationOptions(max_tokens=400))
    assert out.text == "two people on a motorcycle"
    (req,) = fake_server.requests
    assert req.path.endswith("/models/gemini-1.5-pro:generateContent")
    assert req.headers["x-goog-api-key"] == "gm-secret"
    body = req.json
    assert "systemInstruction" not in body  # the Gemini template has no system turn
    assert body["generationConfig"]["maxOutputTokens"] == 400
    (content,) = body["contents"]
    parts = content["parts"]
    assert parts[0]["text"].startswith("I have provided you 2 image(s)")
    assert _b64(parts[1]["inlineData"]["data"]) == imgs[1].read_bytes()
    inline = parts[1]["inlineData"]
    assert inline.get("mimeType", inline.get("mime_type")) == "image/jpeg"  # the SDK's own serialisation
    assert parts[2]["text"] == rows[1]["captions"][0]
    assert _b64(parts[3]["inlineData"]["data"]) == imgs[2].read_bytes()
    assert parts[4]["text"] == rows[2]["captions"][0]
    assert _b64(parts[5]["inlineData"]["data"]) == imgs[0].read_bytes()
    assert len(parts) == 6
    # 3 images billed per image; the text share of the prompt total excludes 258 tokens per image
    assert out.usage.input_images == 3 and out.usage.input_text_tokens == 900 - 3 * 258


def test_system_turn_becomes_system_instruction(gemini, fake_server):
    from unirag.messages import Message, TextPart

    gemini.generate([Message("system", [TextPart("be brief")]), Message("user", [TextPart("hi")])])
    body = fake_server.requests[-1].json
    assert body["systemInstruction"]["parts"][0]["text"] == "be brief"
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


@pytest.mark.parametrize("reply, retryable, status, retry_after", [
    (Reply.error(429, "quota", retry_after="3"), True, 429, 3.0),
    (Reply.error(500, "internal"), True, 500, None),
    (Reply.error(400, "bad request"), False, 400, None),
    (Reply(body=b"not json at all"), True, None, None),
    (Reply(json={"candidates": []}), True, None, None),
])
def test_errors(gemini, fake_server, reply, retryable, status, retry_after):
    from unirag.messages import Message, TextPart

    fake_server.push(reply)
    with pytest.raises(BackendError) as ei:
        gemini.generate([Message("user", [TextPart("hi")])])
    assert (ei.value.retryable, ei.value.status, ei.value.retry_after) == (retryable, status, retry_after)


def test_missing_key_is_a_config_error(no_api_keys):
    with pytest.raises(ConfigError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        load_generator("gemini:gemini-1.5-pro")


def test_google_api_key_fallback_is_sent_and_client_rebuilt_after_close(fake_server, no_api_keys, monkeypatch):
    from unirag.messages import Message, TextPart

    monkeypatch.setenv("GOOGLE_API_KEY", "goog-secret")
    fake_server.responder = lambda req: Reply.gemini("ok")
    gen = load_generator("gemini:gemini-1.5-pro", base_url=fake_server.base, timeout=2)
    assert gen.config()["api_key_env"] == "GOOGLE_API_KEY"
    assert "goog-secret" not in repr(gen.config())  # the run config names the variable, never the key
    gen.generate([Message("user", [TextPart("hi")])])
    gen.close()
    gen.generate([Message("user", [TextPart("again")])])
    assert [r.headers["x-goog-api-key"] for r in fake_server.requests] == ["goog-secret", "goog-secret"]


def test_connection_names_an_explicit_key_variable_and_shares_one_client(no_api_keys, monkeypatch):
    import threading

    from unirag.generators.gemini import GeminiGenerator

    with pytest.raises(ConfigError, match=r"set the MY_GEMINI_KEY environment variable") as ei:
        GeminiGenerator("gemini-1.5-pro", base_url=None, api_key_env="MY_GEMINI_KEY", timeout=5)
    assert "GOOGLE_API_KEY" not in str(ei.value)
    monkeypatch.setenv("GEMINI_API_KEY", "gm")  # a default variable does not stand in for the named one
    with pytest.raises(ConfigError, match="MY_GEMINI_KEY"):
        GeminiGenerator("gemini-1.5-pro", base_url=None, api_key_env="MY_GEMINI_KEY", timeout=5)
    monkeypatch.setenv("MY_GEMINI_KEY", "mine")
    conn = GeminiGenerator("gemini-1.5-pro", base_url="http://127.0.0.1:9", api_key_env="MY_GEMINI_KEY", timeout=5)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(conn.client())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 1  # worker threads share one lazily built client
    conn.close()
    assert conn.client() is not seen[0]
