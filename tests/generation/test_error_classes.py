"""Which failures are retried, which are recorded, and which are bugs that must stop the run with a traceback."""

from __future__ import annotations

import pytest

from fake_openai_server import Reply
from unirag.errors import BackendError, MalformedResponseError
from unirag.generators.registry import load_generator
from unirag.messages import Message, TextPart
from unirag.runs.executor import run_items
from unirag.runs.retry import RetryPolicy
from unirag.runs.store import ResultStore

HI = [Message("user", [TextPart("hi")])]
FAST = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)


def _run_one(gen, tmp_path):
    with ResultStore(tmp_path / "out.jsonl") as store:
        counts = run_items(["q1"], key=str, work=lambda _: [{"caption": gen.generate(HI).text}], store=store,
                           policy=FAST, progress=False)
        return counts, store.get("q1")


@pytest.fixture
def gemini(fake_server, no_api_keys, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "gm-secret")
    return load_generator("gemini:gemini-1.5-pro", base_url=fake_server.base, timeout=2)


@pytest.fixture
def openai_gen(fake_server, no_api_keys):
    return load_generator("openai:gpt-4o", base_url=fake_server.url, timeout=2)


def test_a_type_error_inside_the_gemini_backend_propagates_with_its_traceback(gemini, fake_server, tmp_path,
                                                                            monkeypatch):
    models = gemini.client().models

    def buggy(**kwargs):
        raise TypeError("generate_content() got an unexpected keyword argument 'confg'")

    monkeypatch.setattr(models, "generate_content", buggy)
    with pytest.raises(TypeError, match="unexpected keyword") as ei:
        _run_one(gemini, tmp_path)
    assert any(tb.name == "buggy" for tb in ei.traceback)  # the original frame, not a re-wrapped error
    assert not (tmp_path / "out.jsonl").exists() or "q1" not in (tmp_path / "out.jsonl").read_text()


@pytest.mark.parametrize("backend", ["openai", "gemini"])
def test_a_client_side_validation_error_is_not_retried(backend, openai_gen, gemini, fake_server, tmp_path,
                                                       monkeypatch):
    gen = openai_gen if backend == "openai" else gemini
    calls = []

    def invalid(**kwargs):
        calls.append(kwargs)
        raise ValueError("temperature must be between 0 and 2")

    if backend == "openai":
        monkeypatch.setattr(gen.client().chat.completions, "create", invalid)
    else:
        monkeypatch.setattr(gen.client().models, "generate_content", invalid)
    with pytest.raises(ValueError, match="temperature"):
        _run_one(gen, tmp_path)
    assert len(calls) == 1  # not retried, and not turned into a "malformed response"


@pytest.mark.parametrize("backend", ["openai", "gemini"])
@pytest.mark.parametrize("status", [429, 500, 503])
def test_429_and_5xx_are_retried_until_they_succeed(backend, status, openai_gen, gemini, fake_server, tmp_path):
    gen = openai_gen if backend == "openai" else gemini
    ok = Reply.chat("a cat") if backend == "openai" else Reply.gemini("a cat")
    fake_server.push(Reply.error(status, "try later"), Reply.error(status, "try later"), ok)
    counts, rec = _run_one(gen, tmp_path)
    assert counts["ok"] == 1 and rec["caption"] == "a cat" and rec["attempts"] == 3
    assert len(fake_server.requests) == 3


@pytest.mark.parametrize("backend", ["openai", "gemini"])
def test_a_400_fails_the_item_at_once_as_an_http_failure(backend, openai_gen, gemini, fake_server, tmp_path):
    gen = openai_gen if backend == "openai" else gemini
    fake_server.push(Reply.error(400, "invalid image"))
    counts, rec = _run_one(gen, tmp_path)
    assert counts["error"] == 1 and rec["error_kind"] == "http" and rec["attempts"] == 1
    assert len(fake_server.requests) == 1


@pytest.mark.parametrize("backend", ["openai", "gemini"])
def test_malformed_output_is_its_own_class_and_failure_kind(backend, openai_gen, gemini, fake_server, tmp_path):
    gen = openai_gen if backend == "openai" else gemini
    bad = Reply(json={"object": "chat.completion"}) if backend == "openai" else Reply(json={"candidates": []})
    fake_server.push(bad)
    with pytest.raises(MalformedResponseError) as ei:
        gen.generate(HI)
    assert not isinstance(ei.value, ValueError) and ei.value.kind == "malformed"
    fake_server.push(bad, bad, bad)
    counts, rec = _run_one(gen, tmp_path)
    assert counts["error"] == 1 and rec["error_kind"] == "malformed"


def test_an_agent_reply_that_never_parses_is_a_malformed_failure(tmp_path):
    from unirag.cir.agents import call_agent
    from unirag.generators.base import Generation, TextGenerator

    class Chatty(TextGenerator):
        spec = "test:chatty"

        def generate(self, messages, options=None):
            return Generation(text="I think the answer is yes.")

    with pytest.raises(MalformedResponseError, match="malformed reply after 2") as ei:
        call_agent(Chatty(), "question", HI, json_attempts=2)
    assert not ei.value.retryable and isinstance(ei.value, BackendError)
    with ResultStore(tmp_path / "c.jsonl", key="key") as store:
        run_items(["k"], key=str, work=lambda _: [call_agent(Chatty(), "question", HI, json_attempts=2)], store=store,
                  policy=FAST, progress=False)
        rec = store.get("k")
    assert rec["status"] == "error" and rec["error_kind"] == "malformed" and rec["attempts"] == 1


def test_only_timeouts_429_and_5xx_statuses_are_retryable():
    from unirag.runs.retry import is_retryable_status

    assert [s for s in (400, 401, 403, 404, 408, 409, 422, 425, 429, 500, 502, 503, 529, 599)
            if is_retryable_status(s)] == [408, 429, 500, 502, 503, 529, 599]
    assert not is_retryable_status(None) and not is_retryable_status(600)


def test_retry_after_headers():
    """``retry-after-ms`` first (an unreadable one falls back to ``Retry-After``), then seconds or an HTTP date."""
    import email.utils
    import time

    from unirag.generators.api import parse_retry_after

    assert parse_retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "soon", "Retry-After": " 9 "}) == 9.0
    assert parse_retry_after({"Retry-After": "-3"}) == 0.0
    later = email.utils.formatdate(time.time() + 100, usegmt=True)
    assert 90 < parse_retry_after({"retry-after": later}) <= 100
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"Retry-After": "whenever"}) is None
    assert parse_retry_after({"X-Other": "1"}) is None and parse_retry_after(None) is None
