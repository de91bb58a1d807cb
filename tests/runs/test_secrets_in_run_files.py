"""No secret in any run file, and a run in which every item failed does not exit 0 (issue 29, point 2).

A provider whose error message echoes the API key it was sent (OpenAI does: "Incorrect API key
provided: sk-...") must not get that key into ``outputs.jsonl``, the manifest, the prompt logs or the
CLI's error line: :mod:`unirag.redact` masks every record and file the run writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from cli_capture import main_result
from fake_openai_server import FakeServer, Reply
from unirag.data.mbeir import write_queries
from unirag.data.records import Modality, Query

KEY = "sk-test-ECHOED-0123456789abcdefXYZ"


def _echo_key(request) -> Reply:
    """What OpenAI answers a wrong key with: a 401 that quotes (most of) the key back."""
    sent = request.headers.get("authorization", "").removeprefix("Bearer ")
    return Reply.error(401, f"Incorrect API key provided: {sent}. You can find your API key at ...")


def _files_holding(root: Path, secret: str) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
            if p.is_file() and secret.encode() in p.read_bytes()]


def _image_queries(tmp_path: Path, n: int = 3) -> Path:
    queries = []
    for i in range(n):
        Image.new("RGB", (8, 8), (40 * i, 10, 10)).save(tmp_path / f"{i}.png")
        queries.append(Query(qid=f"q{i}", modality=Modality.IMAGE, img_path=f"{i}.png"))
    write_queries(tmp_path / "queries.jsonl", queries)
    return tmp_path / "queries.jsonl"


def _text_queries(tmp_path: Path, n: int = 3) -> Path:
    queries = [Query(qid=f"t{i}", modality=Modality.TEXT, txt=f"a red square number {i}") for i in range(n)]
    write_queries(tmp_path / "text_queries.jsonl", queries)
    return tmp_path / "text_queries.jsonl"


def test_caption_key_echoed_by_provider_is_in_no_file_and_all_failed_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    queries = _image_queries(tmp_path)
    out = tmp_path / "run"
    with FakeServer(responder=_echo_key) as srv:
        code, stdout, stderr = main_result(
            ["caption", "--queries", str(queries), "--images-root", str(tmp_path), "--generator", "openai:gpt-4o",
             "--mode", "zero-shot", "--out", str(out), "--base-url", srv.url, "--no-progress"], capsys)
        assert srv.requests and srv.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was sent
    recs = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    assert [r["status"] for r in recs] == ["error"] * 3
    assert "Incorrect API key provided: ***" in recs[0]["error"]  # the message is kept, the key is not
    assert _files_holding(out, KEY) == []
    assert KEY not in stdout + stderr
    assert code == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: all 3 queries tried in this run failed (first error: ") and "***" in last


def test_generate_images_key_echoed_is_in_no_file_and_all_failed_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    queries = _text_queries(tmp_path)
    out = tmp_path / "images"
    with FakeServer(responder=_echo_key) as srv:
        code, stdout, stderr = main_result(
            ["generate-images", "--queries", str(queries), "--generator", "openai-image:gpt-image-1",
             "--out", str(out), "--base-url", srv.url, "--no-progress"], capsys)
    recs = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    assert [r["status"] for r in recs] == ["error"] * 3
    assert _files_holding(out, KEY) == []
    assert KEY not in stdout + stderr
    assert code == 1, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: all 3 queries tried in this run failed")


def test_a_run_with_one_success_exits_0(tmp_path, monkeypatch, capsys):
    """Only a run in which *every* item failed is a failure: partial failures are recorded and retried."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    queries = _image_queries(tmp_path)
    out = tmp_path / "run"
    with FakeServer(responder=_echo_key) as srv:
        srv.push(Reply.chat("a small red square"))
        code, _, stderr = main_result(
            ["caption", "--queries", str(queries), "--images-root", str(tmp_path), "--generator", "openai:gpt-4o",
             "--mode", "zero-shot", "--out", str(out), "--base-url", srv.url, "--no-progress",
             "--concurrency", "1"], capsys)
    assert code == 0, stderr
    assert _files_holding(out, KEY) == []


def test_each_append_is_masked_before_it_reaches_the_file(tmp_path, monkeypatch):
    """A run killed before its final compaction leaves only appended lines: each is masked as written."""
    from unirag.runs.atomic import atomic_write_json, atomic_write_text
    from unirag.runs.store import ResultStore

    monkeypatch.setenv("MY_PROVIDER_TOKEN", KEY)
    with ResultStore(tmp_path / "outputs.jsonl") as store:
        rec = {"qid": "q1", "status": "error", "error": f"server said: bad token {KEY}", "nested": [{"k": KEY}]}
        assert store.append(rec) is rec
        assert store.get("q1")["error"] == "server said: bad token ***"
    atomic_write_json(tmp_path / "manifest.json", {"settings": {"url": f"http://h/?api_key={KEY}"}})
    atomic_write_text(tmp_path / "prompt.txt", f"Authorization: Bearer {KEY}")
    assert _files_holding(tmp_path, KEY) == []
    assert json.loads((tmp_path / "outputs.jsonl").read_text())["nested"] == [{"k": "***"}]
