"""openai-image backend against a local server speaking /v1/images/generations and /v1/images/edits."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from fake_openai_server import RecordedRequest, Reply
from unirag.data.mbeir import read_queries
from unirag.errors import BackendError, ConfigError
from unirag.generators.images.base import ImageRequest
from unirag.generators.registry import IMAGE, load_generator
from unirag.pipelines.image_gen import ImageConfig, picture_settings, run_images
from unirag.retrieval.results import Pair

from .helpers import multipart_fields, openai_image_reply, read_pixels, solid_png

RED = solid_png((200, 10, 10))


@pytest.fixture()
def gen(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    g = load_generator("openai-image:gpt-image-1", IMAGE, base_url=server.url, timeout=5)
    yield g
    g.close()


def test_zero_shot_calls_generations_with_caption_and_decodes_b64(server, gen):
    server.push(openai_image_reply(RED, input_tokens=40, output_tokens=1056))
    out = gen.generate(ImageRequest(qid="q", caption="A red square.", width=1024, height=1536))
    req = server.requests[0]
    assert req.method == "POST" and req.path == "/v1/images/generations"
    assert req.json == {"model": "gpt-image-1", "prompt": "A red square.", "n": 1, "size": "1024x1536",
                        "output_format": "png"}
    assert req.headers["authorization"] == "Bearer unused-local-server"
    assert out.image.size == (16, 12) and out.image.getpixel((3, 3)) == (200, 10, 10)
    assert (out.usage.input_tokens, out.usage.input_text_tokens, out.usage.input_image_tokens,
            out.usage.output_tokens, out.usage.input_images) == (40, 40, 0, 1056, 0)


def test_few_shot_calls_edits_with_reference_images_in_order(server, gen, t2i_data):
    server.push(openai_image_reply(RED, input_tokens=700, image_tokens=600))
    rec = t2i_data.records
    examples = [Pair.of(t2i_data.root / rec[1]["image"], rec[1]["captions"][1], "img:1"),
                Pair.of(t2i_data.root / rec[2]["image"], rec[2]["captions"][1], "img:2")]
    out = gen.generate(ImageRequest(qid="q", caption=rec[0]["captions"][0], examples=examples))
    req = server.requests[0]
    assert req.path == "/v1/images/edits" and req.headers["content-type"].startswith("multipart/form-data")
    fields = multipart_fields(req)
    files = [f for f in fields if f[1] is not None]
    values = {name: payload.decode() for name, filename, _, payload in fields if filename is None}
    assert [f[0] for f in files] == ["image[]", "image[]"]
    assert [f[1] for f in files] == ["example_1.jpg", "example_2.jpg"]
    assert [f[2] for f in files] == ["image/jpeg", "image/jpeg"]
    assert files[0][3] == examples[0].image.read_bytes() and files[1][3] == examples[1].image.read_bytes()
    assert values["model"] == "gpt-image-1" and values["size"] == "1024x1024" and values["output_format"] == "png"
    prompt = values["prompt"]
    assert f"[1] {rec[1]['captions'][1]}" in prompt and f"[2] {rec[2]['captions'][1]}" in prompt
    assert prompt.index("[1]") < prompt.index("[2]") < prompt.rindex(rec[0]["captions"][0])
    assert "2 reference image(s)" in prompt and out.meta["prompt"] == prompt
    assert (out.usage.input_image_tokens, out.usage.input_text_tokens, out.usage.input_images) == (600, 100, 2)


def test_status_errors_map_to_retryable_or_permanent(server, gen):
    req = ImageRequest(qid="q", caption="c")
    server.push(Reply.error(429, "slow down", retry_after="1.5"), Reply.error(503, "overloaded"),
                Reply.error(400, "Invalid size"), Reply(body=b"not json at all"))
    with pytest.raises(BackendError) as e429:
        gen.generate(req)
    assert e429.value.retryable and e429.value.retry_after == 1.5 and e429.value.status == 429
    with pytest.raises(BackendError) as e503:
        gen.generate(req)
    assert e503.value.retryable and e503.value.status == 503
    with pytest.raises(BackendError) as e400:
        gen.generate(req)
    assert not e400.value.retryable and "Invalid size" in str(e400.value)
    with pytest.raises(BackendError) as bad:
        gen.generate(req)
    assert bad.value.retryable


def test_timeout_is_retryable(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    g = load_generator("openai-image:gpt-image-1", IMAGE, base_url=server.url, timeout=0.3)
    server.push(Reply(json={}, delay=1.5))
    with pytest.raises(BackendError, match="timed out") as e:
        g.generate(ImageRequest(qid="q", caption="c"))
    assert e.value.retryable


def _scripted(failures: dict[str, list[Reply]]):
    """Responder: per query caption, the scripted failures come first, then a success (thread-safe)."""
    lock = threading.Lock()
    colors = {}

    def respond(req: RecordedRequest) -> Reply:
        prompt = req.json["prompt"]
        with lock:
            queue = failures.get(prompt, [])
            if queue:
                return queue.pop(0)
            colors.setdefault(prompt, (len(colors) * 30 % 256, 100, 50))
            return openai_image_reply(solid_png(colors[prompt]))

    return respond, colors


def test_run_retries_transient_errors_and_fails_only_the_permanent_query(server, gen, t2i_data, tmp_path):
    queries = read_queries(t2i_data.queries)
    a, b, c = queries[0].txt, queries[1].txt, queries[2].txt
    failures = {a: [Reply.error(429, "rate limited", retry_after="0")],
                b: [Reply.error(500, "boom"), Reply.error(502, "bad gateway")],
                c: [Reply.error(400, "Your request was rejected by the safety system")] * 10}
    server.responder, colors = _scripted(failures)
    out = tmp_path / "run"
    counts = run_images(ImageConfig(queries=queries, generator=gen.spec, out=out, concurrency=3, max_attempts=4,
                                    progress=False), gen)
    assert counts["ok"] == len(queries) - 1 and counts["error"] == 1
    recs = {r["qid"]: r for r in map(json.loads, (out / "outputs.jsonl").read_text().splitlines())}
    assert recs[queries[0].qid]["attempts"] == 2 and recs[queries[1].qid]["attempts"] == 3
    bad = recs[queries[2].qid]
    assert bad["status"] == "error" and "400" in bad["error"] and "safety system" in bad["error"]
    assert bad["attempts"] == 1 and "image" not in bad
    for q in queries:
        if q.txt != c:
            r = recs[q.qid]
            assert r["status"] == "ok" and r["usage"]["output_tokens"] == 272
            # gpt-image-1 default price: $5 per 1M text-in tokens, $40 per 1M image-out tokens.
            assert r["cost_usd"] == pytest.approx((50 * 5.0 + 272 * 40.0) / 1e6)
            assert np.array_equal(read_pixels(out / r["image"])[0, 0], np.array(colors[q.txt], dtype=np.uint8))
    # 429 once + 500/502 twice + one 400 + one success per ok query.
    assert len(server.requests) == 1 + 2 + 1 + len(queries) - 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and manifest["counts"]["error"] == 1
    assert manifest["totals"]["cost_usd"] == pytest.approx(sum(recs[q.qid]["cost_usd"] for q in queries
                                                               if q.txt != c))
    assert "unused-local-server" not in (out / "manifest.json").read_text()
    assert set(manifest["identity"]["templates"]) == {"image_zeroshot", "image_fewshot_api"}

    # Resume: only the failed query is sent again; it now succeeds; one line per qid.
    failures[c] = []
    before = len(server.requests)
    counts = run_images(ImageConfig(queries=queries, generator=gen.spec, out=out, concurrency=3, max_attempts=4,
                                    progress=False), gen)
    assert counts["ok"] == 1 and counts["skipped"] == len(queries) - 1
    assert [r.json["prompt"] for r in server.requests[before:]] == [c]
    lines = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in lines] == [q.qid for q in queries] and all(r["status"] == "ok" for r in lines)
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_settings_the_model_cannot_take_fail_before_the_run(server, gen, monkeypatch):
    with pytest.raises(ConfigError, match="supported sizes"):
        gen.check_size(1000, 1000)
    dalle3 = load_generator("openai-image:dall-e-3", IMAGE, base_url=server.url)
    with pytest.raises(ConfigError, match="text-only"):
        dalle3.check_k(1)
    with pytest.raises(ConfigError, match="at most 16"):
        gen.check_k(17)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        load_generator("openai-image:gpt-image-1", IMAGE)


def test_dalle_asks_for_base64(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    g = load_generator("openai-image:dall-e-3", IMAGE, base_url=server.url)
    server.push(Reply(json={"created": 1, "data": [{"b64_json": __import__("base64").b64encode(RED).decode(),
                                                     "revised_prompt": "A vivid red square."}]}))
    out = g.generate(ImageRequest(qid="q", caption="red"))
    assert server.requests[0].json["response_format"] == "b64_json"
    assert "output_format" not in server.requests[0].json
    assert out.meta["revised_prompt"] == "A vivid red square." and out.usage is None
    assert picture_settings(g.spec) == {"width": 1024, "height": 1024, "steps": 25, "guidance": 4.0, "seed": 1234}


def test_unpriced_model_has_no_cost_until_a_price_file_gives_one(server, monkeypatch, t2i_data, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    g = load_generator("openai-image:local-flux", IMAGE, base_url=server.url)  # a compatible server's model
    server.responder = lambda req: openai_image_reply(RED, input_tokens=1000, output_tokens=2000)
    queries = read_queries(t2i_data.queries)[:2]
    out = tmp_path / "unpriced"
    run_images(ImageConfig(queries=queries, generator=g.spec, out=out, progress=False), g)
    recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert [r["cost_usd"] for r in recs] == [None, None]
    assert json.loads((out / "manifest.json").read_text())["totals"]["cost_usd"] is None
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"local-flux": {"input_text_per_1k": 0.001, "output_per_1k": 0.01}}))
    out2 = tmp_path / "priced"
    run_images(ImageConfig(queries=queries, generator=g.spec, out=out2, prices=prices, progress=False), g)
    recs = [json.loads(x) for x in (out2 / "outputs.jsonl").read_text().splitlines()]
    assert [r["cost_usd"] for r in recs] == [pytest.approx(0.021)] * 2
    manifest = json.loads((out2 / "manifest.json").read_text())
    assert manifest["totals"]["cost_usd"] == pytest.approx(0.042)
    assert manifest["settings"]["price"]["output_per_1k"] == 0.01
