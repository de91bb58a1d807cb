"""The Python API is as careful as the CLI: retries, option checks and argument types.

Before: ``Captioner.caption`` made one attempt (3 of 6 calls against a flaky server raised
BackendError where a run retries), unknown keyword options were dropped silently, and bad
arguments gave TypeError/ValueError/ZeroDivisionError from deep inside (or were accepted:
``["a", 5]`` stored "5", ``retrieval:consensus`` captioned ``None``).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import unirag
from fake_openai_server import Reply
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.images.base import GeneratedImage, ImageBackend
from unirag.runs.retry import RetryPolicy

FAST = RetryPolicy(base_delay=0.001, max_delay=0.01)


@pytest.fixture
def photo(demo):
    return sorted(demo["images"].glob("*.jpg"))[0]


def test_caption_retries_transient_errors_like_a_run(fake_server, no_api_keys, monkeypatch, photo) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    captioner = unirag.Captioner("openai:gpt-4o", base_url=fake_server.url, retry=FAST)
    assert captioner.retry.max_attempts == RetryPolicy().max_attempts  # the runs' policy, same default
    for _ in range(6):  # a server that answers 429 or 500 before each success
        fake_server.push(Reply.error(429, "slow down", retry_after="0"), Reply.error(500, "oops"), Reply.chat("a dog"))
        out = captioner.caption(photo)
        assert out.text == "a dog" and out.attempts == 3
    fake_server.push(Reply.error(500))
    n = len(fake_server.requests)
    with pytest.raises(BackendError):
        unirag.Captioner("openai:gpt-4o", base_url=fake_server.url, max_attempts=1).caption(photo)
    assert len(fake_server.requests) == n + 1
    fake_server.push(Reply.error(400, "bad request"))
    n = len(fake_server.requests)
    with pytest.raises(BackendError):  # permanent: no retry
        captioner.caption(photo)
    assert len(fake_server.requests) == n + 1


class _Flaky(ImageBackend):
    spec = "test:flaky"

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def generate(self, request):
        self.calls += 1
        if self.calls <= self.failures:
            raise BackendError("503 from the image API", retryable=True, status=503)
        return GeneratedImage(image=Image.new("RGB", (8, 8), (1, 2, 3)), meta={})

    def config(self):
        return {}


def test_image_generator_retries_with_max_attempts() -> None:
    backend = _Flaky(failures=2)
    image = unirag.ImageGenerator(backend, retry=FAST).generate("a red bus")
    assert backend.calls == 3 and image.getpixel((0, 0)) == (1, 2, 3)
    with pytest.raises(BackendError):
        unirag.ImageGenerator(_Flaky(failures=2), max_attempts=2, retry=FAST).generate("a red bus")


@pytest.mark.parametrize("make", [
    lambda: unirag.Captioner("openai:gpt-4o", max_atempts=3),
    lambda: unirag.Captioner("retrieval:consensus", similarty="lexical"),
    lambda: unirag.ImageGenerator("retrieval:top1", stpes=10),
])
def test_unknown_options_name_the_option_and_the_known_ones(make) -> None:
    with pytest.raises(ConfigError, match=r"unknown option '(max_atempts|similarty|stpes)'; known options: .*"
                                          r"base_url.*max_attempts"):
        make()


def test_known_options_list_matches_the_backends() -> None:
    """The static list the check uses is the union of what the backends' constructors declare."""
    import importlib
    import inspect

    from unirag.generators.registry import BACKENDS, KNOWN_GENERATOR_OPTIONS

    declared = set()
    for target, _ in [entry for table in BACKENDS.values() for entry in table.values()]:
        module, attr = target.split(":")
        params = inspect.signature(getattr(importlib.import_module(module), attr).__init__).parameters
        declared |= {k for k, p in params.items() if k not in ("self", "name", "spec")
                     and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and k != "options"}
    assert declared == set(KNOWN_GENERATOR_OPTIONS)


def test_bad_argument_types_name_the_argument(demo, photo) -> None:
    cases = [
        (lambda: unirag.Captioner(5), "generator"),
        (lambda: unirag.Captioner("retrieval:top1", max_tokens="400"), "max_tokens"),
        (lambda: unirag.Captioner("retrieval:top1", max_attempts=0), "max_attempts"),
        (lambda: unirag.Captioner("retrieval:top1", retry=3), "retry"),
        (lambda: unirag.Captioner("retrieval:consensus").caption(None, [(photo, "a dog")]), "image"),
        (lambda: unirag.Captioner("retrieval:consensus").caption(np.zeros((4, 4), np.float64), [(photo, "a dog")]),
         "image"),
        (lambda: unirag.Captioner("retrieval:consensus").caption(photo, [(photo, 5)]), "examples[0]"),
        (lambda: unirag.ImageGenerator("retrieval:top1").generate(7, [(photo, "a dog")]), "text"),
        (lambda: unirag.ImageGenerator("retrieval:top1", width="1024"), "width"),
        (lambda: unirag.Retriever(None), "index"),
        (lambda: unirag.Pool.from_pairs([(photo, None)]), "pairs[0][1] (captions)"),
        (lambda: unirag.Pool.from_pairs([(photo,)]), "pairs[0]"),
        (lambda: unirag.Pool.from_pairs([(photo, ["a", 5])]), "pairs[0][1] (captions)"),
        (lambda: unirag.Pool.from_pairs([(None, "a dog")]), "pairs[0][0] (image)"),
        (lambda: unirag.Pool.from_pairs(None), "pairs"),
    ]
    for make, field in cases:
        with pytest.raises(InputError) as err:
            make()
        assert err.value.field == field, (field, str(err.value))
        assert "expected" in str(err.value) or "needs" in str(err.value) or "not found" in str(err.value), str(err.value)


def test_search_and_caption_refuse_empty_and_bomb_images(retriever, fake_server, no_api_keys, monkeypatch,
                                                          tmp_path) -> None:
    from image_variants import bomb_png

    with pytest.raises(InputError, match="empty image"):
        retriever.search(image=np.zeros((0, 0, 3), np.uint8))
    bomb = bomb_png(tmp_path / "bomb.png")
    for given in (bomb, bomb.read_bytes()):
        with pytest.raises(InputError, match="decompression bomb|more than the"):
            retriever.search(image=given)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    n = len(fake_server.requests)
    for given in (bomb, bomb.read_bytes()):
        with pytest.raises(InputError, match="decompression bomb"):
            unirag.Captioner("openai:gpt-4o", base_url=fake_server.url).caption(given)
    assert len(fake_server.requests) == n  # refused before any call
