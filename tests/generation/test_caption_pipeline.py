"""Caption runs end to end against the fake server: retries, permanent failures, resume, manifest, prompts."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

import pytest

from fake_openai_server import Reply
from unirag.errors import ConfigError
from unirag.pipelines.caption import CaptionConfig, run_captioning


def _cfg(coco_set, out, srv, **kw) -> CaptionConfig:
    base = dict(queries=coco_set["queries"], generator="openai:gpt-4o", out=out, mode="zero-shot", k=0,
                images_root=coco_set["images_root"], pool=coco_set["pool"], concurrency=4, limit=6,
                generator_options={"base_url": srv.url, "timeout": 0.5}, progress=False)
    base.update(kw)
    return CaptionConfig(**base)


def _query_url(body) -> str:
    """Data URL of the query image: the last image part of the user turn."""
    return [c for c in body["messages"][-1]["content"] if c["type"] == "image_url"][-1]["image_url"]["url"]


def _url_of(coco_set, i: int) -> str:
    data = (coco_set["images_root"] / coco_set["rows"][i]["image"]).read_bytes()
    return "data:image/jpeg;base64," + base64.b64encode(data).decode()


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]


def test_transient_failures_are_retried_and_every_query_succeeds(coco_set, fake_server, no_api_keys, tmp_path):
    failures = [Reply.error(429, "slow down", retry_after="0"), Reply.error(500, "oops"),
                Reply(body=b"<html>bad gateway"), Reply(delay=1.5), Reply.error(503, "busy", retry_after="0"),
                Reply(drop=True)]
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def responder(req):
        url = _query_url(req.json)
        with lock:
            n = seen.get(url, 0)
            seen[url] = n + 1
            idx = len(seen) - 1 if n == 0 else None
        if idx is not None:
            return failures[idx % len(failures)]  # each query's first call fails, a different way
        return Reply.chat(f"caption of {url[-12:]}", prompt_tokens=1000, completion_tokens=10)

    fake_server.responder = responder
    out = tmp_path / "run"
    summary = run_captioning(_cfg(coco_set, out, fake_server))
    assert summary["counts"] == {"queries": 6, "ok": 6, "error": 0, "missing": 0}
    recs = _lines(out)
    assert [r["qid"] for r in recs] == [f"q{r['image_id']}" for r in coco_set["rows"][:6]]  # query order
    assert all(r["status"] == "ok" and r["attempts"] == 2 and r["caption"].startswith("caption of") for r in recs)
    assert len(fake_server.requests) == 12
    assert all(r["cost_usd"] > 0 for r in recs)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["totals"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in recs), abs=1e-6)


def test_permanent_error_fails_only_that_query_and_a_rerun_retries_it(coco_set, fake_server, no_api_keys, tmp_path):
    bad = _url_of(coco_set, 2)
    state = {"reject": True}

    def responder(req):
        if state["reject"] and _query_url(req.json) == bad:
            return Reply.error(400, "Invalid image: unsupported content")
        return Reply.chat("a caption")

    fake_server.responder = responder
    out = tmp_path / "run"
    first = run_captioning(_cfg(coco_set, out, fake_server))
    assert first["counts"]["ok"] == 5 and first["counts"]["error"] == 1
    failed = [r for r in _lines(out) if r["status"] == "error"]
    assert len(failed) == 1 and failed[0]["qid"] == f"q{coco_set['rows'][2]['image_id']}"
    assert "400" in failed[0]["error"] and "Invalid image" in failed[0]["error"] and "caption" not in failed[0]
    assert failed[0]["attempts"] == 1  # permanent: not retried
    assert json.loads((out / "manifest.json").read_text())["status"] == "incomplete"

    state["reject"] = False
    n_before = len(fake_server.requests)
    second = run_captioning(_cfg(coco_set, out, fake_server))
    assert second["this_run"] == {"ok": 1, "error": 0, "skipped": 5}
    assert len(fake_server.requests) == n_before + 1  # only the failed query is asked again
    recs = _lines(out)
    assert len(recs) == 6 and len({r["qid"] for r in recs}) == 6 and all(r["status"] == "ok" for r in recs)


def test_empty_answer_is_a_failure_not_an_empty_caption(coco_set, fake_server, no_api_keys, tmp_path):
    fake_server.responder = lambda req: Reply.chat("   ")
    out = tmp_path / "run"
    run_captioning(_cfg(coco_set, out, fake_server, limit=2))
    recs = _lines(out)
    assert len(recs) == 2  # both queries are recorded (an empty file must not pass the check below vacuously)
    assert all(r["status"] == "error" and "empty caption" in r["error"] and "caption" not in r for r in recs)


def test_resume_refuses_a_different_configuration(coco_set, fake_server, no_api_keys, tmp_path):
    out = tmp_path / "run"
    run_captioning(_cfg(coco_set, out, fake_server, limit=2))
    with pytest.raises(ConfigError, match="different configuration.*k"):
        run_captioning(_cfg(coco_set, out, fake_server, limit=2, mode="rag", k=1, retrieval=coco_set["run"]))
    # execution settings may change between runs (concurrency, limit, server URL)
    summary = run_captioning(_cfg(coco_set, out, fake_server, limit=3, concurrency=1))
    assert summary["this_run"] == {"ok": 1, "error": 0, "skipped": 2}


def test_manifest_records_templates_and_sources_but_no_secret(coco_set, fake_server, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-123")
    out = tmp_path / "run"
    run_captioning(_cfg(coco_set, out, fake_server, mode="random", k=2, seed=7))
    for f in out.rglob("*"):
        if f.is_file():
            assert b"sk-very-secret-123" not in f.read_bytes(), f
    assert fake_server.requests[0].headers["authorization"] == "Bearer sk-very-secret-123"
    m = json.loads((out / "manifest.json").read_text())
    ident = m["identity"]
    assert ident["mode"] == "random" and ident["k"] == 2 and ident["seed"] == 7
    assert ident["queries"] == str(Path(coco_set["queries"]).resolve())
    from unirag.prompts.templates import load_template

    assert ident["templates"][0]["sha256"] == load_template("caption_gpt4o").sha256
    assert m["settings"]["generator_config"]["api_key_env"] == "OPENAI_API_KEY"
    assert "openai" in m["packages"] and m["counts"]["ok"] == 6
    # random examples: two gold pairs of other queries, recorded per output
    for r in _lines(out):
        assert len(r["examples"]) == 2 and all(e["txt"] for e in r["examples"])
        assert f"q{Path(r['examples'][0]['img_path']).stem.lstrip('0')}" != r["qid"]


def test_prompts_dir_holds_the_first_prompts_and_merged_images(coco_set, fake_server, no_api_keys, tmp_path):
    out = tmp_path / "run"
    run_captioning(_cfg(coco_set, out, fake_server, mode="rag", k=2, retrieval=coco_set["run"],
                        generator_options={"base_url": fake_server.url, "family": "llava"}, save_prompts=3))
    files = sorted(p.name for p in (out / "prompts").iterdir())
    q0 = f"q{coco_set['rows'][0]['image_id']}"
    assert len([f for f in files if f.endswith(".txt") and not f.endswith(".sent.txt")]) == 3 and f"000_{q0}.txt" in files
    assert len([f for f in files if f.endswith(".sent.txt")]) == 3  # and each exactly as sent
    text = (out / "prompts" / f"000_{q0}.txt").read_text()
    assert "Caption [3]: ..." in text and "Caption [1]: " + coco_set["rows"][1]["captions"][0] in text
    from PIL import Image

    merged = Image.open(out / "prompts" / f"000_{q0}_merged.png")
    heights = [r["height"] for r in (coco_set["rows"][1], coco_set["rows"][2], coco_set["rows"][0])]
    assert merged.size == (640, sum(heights) + 2 * 5)
    # the llava family sends exactly one image per request
    body = fake_server.requests[0].json
    assert len([c for c in body["messages"][0]["content"] if c["type"] == "image_url"]) == 1


def test_missing_image_fails_that_query_only(coco_set, fake_server, no_api_keys, tmp_path):
    from unirag.data.mbeir import read_queries, write_queries

    qs = read_queries(coco_set["queries"])[:3]
    qs[1].img_path = "images/does-not-exist.jpg"
    qfile = tmp_path / "q.jsonl"
    write_queries(qfile, qs)
    out = tmp_path / "run"
    summary = run_captioning(_cfg(coco_set, out, fake_server, queries=qfile))
    assert summary["counts"]["ok"] == 2 and summary["counts"]["error"] == 1
    (bad,) = [r for r in _lines(out) if r["status"] == "error"]
    assert bad["qid"] == qs[1].qid and "does-not-exist.jpg" in bad["error"]


def test_config_errors(coco_set, fake_server, no_api_keys, tmp_path):
    with pytest.raises(ConfigError, match="use --mode rag"):
        run_captioning(_cfg(coco_set, tmp_path / "a", fake_server, generator="retrieval:consensus"))
    with pytest.raises(ConfigError, match="unknown generator spec 'llama:x'.*openai:.*gemini:.*hf:.*retrieval:"):
        run_captioning(_cfg(coco_set, tmp_path / "b", fake_server, generator="llama:x"))
    with pytest.raises(ConfigError, match="exactly one of --retrieval"):
        run_captioning(_cfg(coco_set, tmp_path / "c", fake_server, mode="rag", k=1))
    with pytest.raises(ConfigError, match="needs --pool"):
        run_captioning(_cfg(coco_set, tmp_path / "d", fake_server, mode="random", k=1, pool=None))
