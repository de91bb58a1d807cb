"""``--save-prompts N`` also writes each prompt exactly as sent (``prompts/NNN_qid.sent.txt``), as the
official scripts' ``prompt_{idx}.txt`` files (castorini/UniRAG src/unirag/caption_generation_inference.py
@e9a4e00:247-250 for LLaVA), so a researcher can diff them against the official ones."""

from __future__ import annotations

import hashlib
import json
import re

from fake_openai_server import FakeServer
from unirag.cli.main import main


def _placeholders(body: dict) -> dict:
    """The body with each base64 image replaced by its length and hash (computed here, independently)."""
    text = json.dumps(body)

    def short(m):
        data = m.group(2)
        return f"{m.group(1)}<{len(data)} base64 chars, sha256 {hashlib.sha256(data.encode()).hexdigest()[:16]}>"

    return json.loads(re.sub(r"(data:[^;\"]+;base64,)([A-Za-z0-9+/=]+)", short, text))


def test_openai_prompts_are_saved_as_the_request_body_sent(coco_set, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-not-secret")
    out = tmp_path / "run"
    with FakeServer() as server:
        main(["caption", "--queries", str(coco_set["queries"]), "--images-root", str(coco_set["images_root"]),
              "--generator", "openai:gpt-4o", "--base-url", server.url, "--mode", "rag", "--k", "2",
              "--retrieval", str(coco_set["run"]), "--limit", "3", "--save-prompts", "2", "--out", str(out),
              "--no-progress", "--concurrency", "1"])
        sent = [r.json for r in server.requests]
    files = sorted((out / "prompts").glob("*.sent.txt"))
    assert len(files) == 2  # the first N only
    saved = [json.loads(f.read_text()) for f in files]
    assert saved == [_placeholders(b) for b in sent[:2]]
    assert "base64," in files[0].read_text() and len(files[0].read_text()) < 20_000  # images shortened


def _gemini_placeholders(body: dict) -> dict:
    """The Gemini body with each inline image's base64 data replaced by its length and hash (computed here)."""
    for content in body["contents"]:
        for part in content["parts"]:
            if "inlineData" in part:
                data = part["inlineData"]["data"]
                part["inlineData"]["data"] = \
                    f"<{len(data)} base64 chars, sha256 {hashlib.sha256(data.encode()).hexdigest()[:16]}>"
    return body


def test_gemini_prompts_are_saved_as_the_request_body_sent(coco_set, tmp_path, monkeypatch, no_api_keys):
    """Gemini's NNN_qid.sent.txt is the JSON body the SDK POSTs (``contents`` with inline images,
    ``generationConfig``), not the rendered messages, and never the key (sent in a header). Under
    ``--profile official`` its text ends with the official sentence after one space (castorini/UniRAG
    src/unirag/prompts/gemini-caption-prompt-with-examples.txt@6c4eda29:5, the file's last line)."""
    from fake_openai_server import Reply
    from unirag.prompts.official import GEMINI_ONE_LINE

    monkeypatch.setenv("GEMINI_API_KEY", "gm-secret-never-written")
    out = tmp_path / "run"
    with FakeServer(responder=lambda req: Reply.gemini("a caption")) as server:
        main(["caption", "--queries", str(coco_set["queries"]), "--images-root", str(coco_set["images_root"]),
              "--generator", "gemini:gemini-1.5-pro", "--base-url", server.base, "--mode", "rag", "--k", "2",
              "--retrieval", str(coco_set["run"]), "--limit", "2", "--save-prompts", "2", "--out", str(out),
              "--no-progress", "--concurrency", "1", "--profile", "official"])
        sent = [r.json for r in server.requests]
    files = sorted((out / "prompts").glob("*.sent.txt"))
    assert len(files) == 2 and len(sent) == 2
    assert [json.loads(f.read_text()) for f in files] == [_gemini_placeholders(b) for b in sent]
    assert all("gm-secret" not in p.read_text() for p in (out / "prompts").iterdir() if p.suffix != ".png")
    text = json.loads(files[0].read_text())["contents"][0]["parts"][0]["text"]
    assert text.endswith("do not say any other words or explain. " + GEMINI_ONE_LINE), text[-160:]
