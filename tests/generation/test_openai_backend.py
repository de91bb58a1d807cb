"""The OpenAI-compatible backend against a local fake chat-completions server: payload and error mapping."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from fake_openai_server import Reply
from unirag.errors import BackendError, ConfigError
from unirag.generators.base import GenerationOptions
from unirag.generators.openai_compat import openai_image_tokens
from unirag.generators.registry import load_generator
from unirag.prompts.caption import build_caption_prompt, caption_template
from unirag.retrieval.results import Pair


def _data_url(path: Path) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(path.read_bytes()).decode()


def test_exact_request_payload_for_a_two_shot_gpt4o_prompt(coco_set, fake_server, no_api_keys):
    rows, root = coco_set["rows"], coco_set["images_root"]
    imgs = [root / r["image"] for r in rows[:3]]
    shots = [Pair.of(imgs[1], rows[1]["captions"][0]), Pair.of(imgs[2], rows[2]["captions"][0])]
    prompt = build_caption_prompt(caption_template("gpt4o"), imgs[0], shots)
    gen = load_generator("openai:gpt-4o", base_url=fake_server.url)
    fake_server.push(Reply.chat("A man making pizzas.", prompt_tokens=5000, completion_tokens=7))
    out = gen.generate(prompt.messages, GenerationOptions(max_tokens=123))
    assert out.text == "A man making pizzas."
    (req,) = fake_server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer unused-local-server"  # no key in env: a local dummy
    body = req.json
    assert body["model"] == "gpt-4o" and body["max_tokens"] == 123 and body["temperature"] == 0.0
    system, user = body["messages"]
    assert system == {"role": "system", "content": caption_template("gpt4o").text("system")}
    assert user["role"] == "user"
    content = user["content"]
    assert [c["type"] for c in content] == ["image_url", "text", "image_url", "text", "image_url", "text"]
    assert content[0]["image_url"]["url"] == _data_url(imgs[1])
    assert content[1]["text"] == f"Caption [1]: {rows[1]['captions'][0]}"
    assert content[2]["image_url"]["url"] == _data_url(imgs[2])
    assert content[3]["text"] == f"Caption [2]: {rows[2]['captions'][0]}"
    assert content[4]["image_url"]["url"] == _data_url(imgs[0])  # the query image, after the examples
    assert content[5]["text"].startswith("I have provided you 2 image(s)")
    # usage: the prompt total is split with OpenAI's tile formula (COCO photos: <= 640 px, one row of tiles)
    tiles = [-(-r["width"] // 512) * -(-r["height"] // 512) for r in rows[:3]]
    assert out.usage.input_tokens == 5000 and out.usage.input_images == 3
    assert out.usage.input_image_tokens == sum(85 + 170 * t for t in tiles)
    assert out.usage.input_text_tokens == 5000 - out.usage.input_image_tokens
    assert out.usage.output_tokens == 7


@pytest.mark.parametrize("reply, retryable, status, retry_after, match", [
    (Reply.error(429, "rate limited", retry_after="7"), True, 429, 7.0, "429"),
    (Reply.error(500, "boom"), True, 500, None, "500"),
    (Reply.error(503, "busy", retry_after="Wed, 21 Oct 2015 07:28:00 GMT"), True, 503, 0.0, "503"),
    (Reply.error(400, "invalid image"), False, 400, None, "400.*invalid image"),
    (Reply.error(401, "bad key"), False, 401, None, "API key"),
    (Reply(body=b"{this is not json"), True, None, None, "malformed"),
    (Reply(json={"object": "chat.completion"}), True, None, None, "malformed.*no choices"),
    (Reply(drop=True), True, None, None, "connection"),
])
def test_errors_map_to_backend_errors(coco_set, fake_server, no_api_keys, reply, retryable, status, retry_after,
                                      match):
    gen = load_generator("openai:gpt-4o", base_url=fake_server.url)
    prompt = build_caption_prompt(caption_template("gpt4o"), coco_set["images_root"] / coco_set["rows"][0]["image"], [])
    fake_server.push(reply)
    with pytest.raises(BackendError, match=match) as ei:
        gen.generate(prompt.messages)
    assert ei.value.retryable is retryable
    assert ei.value.status == status
    assert ei.value.retry_after == retry_after


def test_timeout_is_retryable(coco_set, fake_server, no_api_keys):
    gen = load_generator("openai:gpt-4o", base_url=fake_server.url, timeout=0.3)
    prompt = build_caption_prompt(caption_template("gpt4o"), coco_set["images_root"] / coco_set["rows"][0]["image"], [])
    fake_server.push(Reply(delay=1.5))
    with pytest.raises(BackendError, match="timed out") as ei:
        gen.generate(prompt.messages)
    assert ei.value.retryable


def test_content_filter_is_permanent_and_json_schema_is_sent(fake_server, no_api_keys):
    from unirag.messages import Message, TextPart

    gen = load_generator("openai:gpt-4o", base_url=fake_server.url)
    fake_server.push(Reply(json={"choices": [{"index": 0, "finish_reason": "content_filter",
                                              "message": {"role": "assistant", "content": None}}]}))
    with pytest.raises(BackendError, match="content filter") as ei:
        gen.generate([Message("user", [TextPart("hi")])])
    assert not ei.value.retryable
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    fake_server.push(Reply.chat('{"a": "b"}'))
    gen.generate([Message("user", [TextPart("hi")])], GenerationOptions(json_schema=schema))
    body = fake_server.requests[-1].json
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert body["messages"] == [{"role": "user", "content": "hi"}]  # text-only turns stay plain strings


def test_key_from_environment_only(monkeypatch, no_api_keys, fake_server):
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        load_generator("openai:gpt-4o")  # official endpoint and no key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    gen = load_generator("openai:gpt-4o", base_url=fake_server.url)
    assert "sk-test-secret" not in repr(gen.config())
    from unirag.messages import Message, TextPart

    gen.generate([Message("user", [TextPart("hi")])])
    assert fake_server.requests[-1].headers["authorization"] == "Bearer sk-test-secret"


def test_image_token_formula():
    assert openai_image_tokens(640, 480, "low") == 85
    assert openai_image_tokens(512, 512) == 85 + 170  # small images are not scaled up: one tile
    assert openai_image_tokens(1024, 1024) == 85 + 170 * 4  # -> 768x768 -> 2x2 tiles
    assert openai_image_tokens(2048, 4096) == 85 + 170 * 6  # -> 1024x2048 -> 768x1536 -> 2x3 tiles
